"""Reading rule packs and code catalogues: libyaml where PyYAML has it, parsed files cached.

Every mapping carries its first line as ``__line__`` so that errors name ``file:line``. The
parsed document of a file is kept in the cache (:mod:`core.cache`) under the SHA-256 of its
bytes, so an unchanged pack is not parsed again; the validation that follows runs every
time. A file the C parser rejects is parsed again by the pure-Python one, whose message the
error carries (the same words as before libyaml was used).
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
from functools import cache as _once
from pathlib import Path
from typing import Any

from ascend_doctor.core import cache

_NAMESPACE = "yaml"
_KEEP = 64
"""Parsed files kept: the shipped packs and catalogues of a few releases, site packs."""


class YamlError(ValueError):
    """A file PyYAML cannot parse; the message is PyYAML's (``file``, line, column, what)."""


@_once
def _installed() -> str:
    """Which PyYAML is installed, read from its files without importing it (a command that
    finds every file in the cache never imports PyYAML: a tenth of its start-up): its
    ``__init__.py``'s and its compiled libyaml binding's sizes and times."""
    spec = importlib.util.find_spec("yaml")
    folder = list(spec.submodule_search_locations or ()) if spec is not None else []
    parts = []
    for d in folder:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            if name == "__init__.py" or (
                name.startswith("_yaml") and name.endswith((".so", ".pyd"))
            ):
                try:
                    st = os.stat(os.path.join(d, name))
                except OSError:
                    continue
                parts.append(f"{d}/{name}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


@_once
def _loaders() -> tuple[Any, Any, Any]:
    """(yaml, LineLoader, PyLineLoader), made when a file is first parsed."""
    import yaml

    c_loader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    def with_lines(loader: Any, node: yaml.MappingNode) -> dict[str, Any]:
        mapping: dict[str, Any] = dict(loader.construct_mapping(node, deep=True))
        mapping["__line__"] = node.start_mark.line + 1
        return mapping

    class LineLoader(c_loader):  # type: ignore[misc]
        """The safe loader (libyaml's when available); each mapping gets ``__line__``."""

    class PyLineLoader(yaml.SafeLoader):
        """The pure-Python safe loader, for its error messages; each mapping gets
        ``__line__``."""

    for loader in (LineLoader, PyLineLoader):
        loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, with_lines)
    return yaml, LineLoader, PyLineLoader


def load_yaml(path: Path) -> Any:
    """The document in ``path``. Raises OSError, UnicodeDecodeError or :class:`YamlError`."""
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    key = cache.key_of("yaml-lines-2", sys.version, _installed(), raw)
    blob = cache.read(_NAMESPACE, key)
    if blob is not None:
        try:
            return marshal.loads(blob)
        except (EOFError, ValueError, TypeError):
            pass  # not ours after all: parsed below
    yaml, line_loader, py_line_loader = _loaders()
    try:
        try:
            doc = yaml.load(text, Loader=line_loader)
        except yaml.YAMLError:
            doc = yaml.load(text, Loader=py_line_loader)  # raises with the familiar message
    except yaml.YAMLError as exc:
        raise YamlError(str(exc)) from exc
    try:
        blob = marshal.dumps(doc)
    except ValueError:
        return doc  # a value marshal cannot hold (a date): parsed each time
    cache.write(_NAMESPACE, key, blob, keep=_KEEP)
    return doc


__all__ = ["YamlError", "load_yaml"]
