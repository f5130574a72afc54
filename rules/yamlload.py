"""Reading rule packs and code catalogues: libyaml where PyYAML has it, parsed files cached.

Every mapping carries its first line as ``__line__`` so that errors name ``file:line``. The
parsed document of a file is kept in the cache (:mod:`core.cache`) under the SHA-256 of its
bytes, so an unchanged pack is not parsed again; the validation that follows runs every
time. A file the C parser rejects is parsed again by the pure-Python one, whose message the
error carries (the same words as before libyaml was used).
"""

from __future__ import annotations

import marshal
import sys
from pathlib import Path
from typing import Any

import yaml

from ascend_doctor.core import cache

_CLoader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NAMESPACE = "yaml"
_KEEP = 64
"""Parsed files kept: the shipped packs and catalogues of a few releases, site packs."""


def _with_lines(loader: Any, node: yaml.MappingNode) -> dict[str, Any]:
    mapping: dict[str, Any] = dict(loader.construct_mapping(node, deep=True))
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


class LineLoader(_CLoader):  # type: ignore[misc]
    """The safe loader (libyaml's when available); each mapping gets ``__line__``."""


class PyLineLoader(yaml.SafeLoader):
    """The pure-Python safe loader, for its error messages; each mapping gets ``__line__``."""


for _loader in (LineLoader, PyLineLoader):
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _with_lines)


def load_yaml(path: Path) -> Any:
    """The document in ``path``. Raises OSError, UnicodeDecodeError or ``yaml.YAMLError``."""
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    key = cache.key_of("yaml-lines-1", sys.version, yaml.__version__, _CLoader.__name__, raw)
    blob = cache.read(_NAMESPACE, key)
    if blob is not None:
        try:
            return marshal.loads(blob)
        except (EOFError, ValueError, TypeError):
            pass  # not ours after all: parsed below
    try:
        doc = yaml.load(text, Loader=LineLoader)
    except yaml.YAMLError:
        return yaml.load(text, Loader=PyLineLoader)  # raises with the familiar message
    try:
        blob = marshal.dumps(doc)
    except ValueError:
        return doc  # a value marshal cannot hold (a date): parsed each time
    cache.write(_NAMESPACE, key, blob, keep=_KEEP)
    return doc


__all__ = ["LineLoader", "PyLineLoader", "load_yaml"]
