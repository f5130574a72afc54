"""drain3's template miner without the parts a scan never uses.

``import drain3`` runs the package's ``__init__``, which imports ``TemplateMiner`` and with it
``jsonpickle`` (for its persistence), which reads every installed distribution's metadata:
74 ms of a command, paid by the first unrecognised error of a scan (issue 18), for state
this doctor never saves. :class:`Miner` does what ``TemplateMiner.add_log_message`` does
(mask the message, add it to a ``Drain`` tree, read its cluster's template) with drain3's
own ``Drain``, ``LogMasker`` and configuration defaults, imported from a ``drain3`` package
whose ``__init__`` is not run: ``drain3.TemplateMiner`` is still there, imported when first
asked for (PEP 562), for any code that wants it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Sequence
from typing import Any


def _lazy(name: str) -> Any:
    """``drain3``'s one name, imported when asked for."""
    if name == "TemplateMiner":
        from drain3.template_miner import TemplateMiner

        return TemplateMiner
    raise AttributeError(f"module 'drain3' has no attribute {name!r}")


def _package() -> None:
    """``drain3`` in ``sys.modules`` as a package whose submodules import, its ``__init__``
    not run (when it was imported already, or cannot be found, nothing is done: the
    imports below then behave as usual)."""
    if "drain3" in sys.modules:
        return
    spec = importlib.util.find_spec("drain3")
    if spec is None or spec.submodule_search_locations is None:
        return
    module = importlib.util.module_from_spec(spec)
    module.__getattr__ = _lazy  # type: ignore[method-assign]
    sys.modules["drain3"] = module


class Miner:
    """Templates of messages, learnt in the order they come (drain3's ``Drain``)."""

    def __init__(self, sim_th: float, masking: Sequence[tuple[str, str]]) -> None:
        """``masking``: (regular expression, mask name) pairs, applied in order."""
        _package()
        from drain3.drain import Drain
        from drain3.masking import LogMasker, MaskingInstruction
        from drain3.template_miner_config import TemplateMinerConfig

        config = TemplateMinerConfig()  # drain3's defaults, as TemplateMiner reads them
        self._drain = Drain(
            sim_th=sim_th,
            depth=config.drain_depth,
            max_children=config.drain_max_children,
            max_clusters=config.drain_max_clusters,
            extra_delimiters=config.drain_extra_delimiters,
            param_str=config.mask_prefix + "*" + config.mask_suffix,
            parametrize_numeric_tokens=config.parametrize_numeric_tokens,
        )
        self._masker = LogMasker(
            [MaskingInstruction(pattern, name) for pattern, name in masking],
            config.mask_prefix,
            config.mask_suffix,
        )

    def template(self, message: str) -> str:
        """The template of ``message``'s cluster once ``message`` is added to it."""
        cluster, _ = self._drain.add_log_message(self._masker.mask(message))
        return str(cluster.get_template())


MASKING = (
    (r"0x[0-9a-fA-F]+", "HEX"),
    (r"\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?", "IP"),
    (r"(?<![A-Za-z_\d])-?\d+(?:\.\d+)?(?![A-Za-z_\d])", "NUM"),
)
"""What a message's template masks before drain3 clusters it: hex values, addresses, numbers."""


class Templates:
    """drain3 over the messages of unrecognised units; one miner per engine, made (and
    drain3 loaded) for the first unrecognised error."""

    def __init__(self) -> None:
        self._miner: Miner | None = None

    def template(self, message: str) -> tuple[str, str]:
        """(template, stable id) of one message."""
        if self._miner is None:
            self._miner = Miner(0.5, MASKING)
        text = self._miner.template(message[:2000]) or message
        return text, hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


__all__ = ["MASKING", "Miner", "Templates"]
