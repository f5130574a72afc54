"""Everything that observes the host: one collector per file, registered by name.

The name is the config table (``[collectors.npu_smi]``), the sample's ``collector`` field,
the store's collector status and the log field. The daemon runs every enabled entry of
:data:`REGISTRY`; the log tailer (``logs.py``) is the one source that is not a collector: it
hands chunks to the rules instead of samples.

The names below are imported when first used: an offline scan reading log files
(``logs.py``) does not load the collectors' HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascend_doctor.collectors.base import Collector, CollectorContext, CollectorSpec

    REGISTRY: dict[str, CollectorSpec]
    """Every collector by its registered name, in the order they start."""


def __getattr__(name: str) -> Any:
    if name == "REGISTRY":
        from ascend_doctor.collectors import canary, npu_smi, process, vllm

        registry = {
            spec.name: spec for spec in (npu_smi.SPEC, vllm.SPEC, process.SPEC, canary.SPEC)
        }
        globals()["REGISTRY"] = registry
        return registry
    if name in ("Collector", "CollectorContext", "CollectorSpec"):
        from ascend_doctor.collectors import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["REGISTRY", "Collector", "CollectorContext", "CollectorSpec"]
