"""Regular expressions compiled once per Python, not once per process.

``re.compile`` parses and compiles a pattern in pure Python: the hundred patterns a command
compiles at import and the rules' patterns a scan confirms matches with cost a command 40 to
90 ms each run (issue 18). What that work produces is a list of opcodes for the C matcher
(``_sre``), the same for the same pattern, flags and Python build. :func:`compile` keeps
those lists in the on-disk cache (:mod:`core.cache`, one entry per Python build) and hands
them to ``_sre.compile`` directly: the pattern object is the one ``re.compile`` returns, and
``_sre`` validates the opcodes it is given (a corrupt entry raises, it is never run). A
pattern not in the table, a table that cannot be read, or a Python whose ``re`` internals
differ is compiled by ``re.compile`` as before, and the table learns it: it is written back
when the process that loaded it exits (forked workers never write).
"""

from __future__ import annotations

import array
import atexit
import importlib
import logging
import marshal
import os
import re
import sys
import threading
from collections.abc import Iterable
from typing import Any, overload

from ascend_doctor.core import cache

log = logging.getLogger(__name__)

_NAMESPACE = "regex"
_KEEP = 4
_VERSION = "sre-code-2"
_CODE = "I"
_CODE_SIZE = array.array(_CODE).itemsize
_MAX_ENTRIES = 1024
"""A table never holds more patterns than this: the doctor compiles about 300 and site rules
add theirs; a table that is full learns no more (each process reads the whole table)."""

_Entry = tuple[int, bytes, int, dict[str, int], tuple[str | None, ...]]
"""flags, the opcodes (``array("I")`` bytes: turned into the list ``_sre`` takes only when
used, most rules' patterns are not), groups, groupindex, indexgroup."""
_lock = threading.Lock()
_table: dict[tuple[str | bytes, int], _Entry] | None = None
_added = 0
_owner = 0

_sre: Any = None
_compiler: Any = None
_parser: Any = None
try:  # the internals this relies on; without them every pattern goes to re.compile
    _sre = importlib.import_module("_sre")
    _compiler = importlib.import_module("re._compiler")
    _parser = importlib.import_module("re._parser")
    _MAGIC = f"{_sre.MAGIC}-{_sre.CODESIZE}"
    if _sre.CODESIZE != _CODE_SIZE:  # pragma: no cover - opcodes wider than an array("I")
        raise ImportError("opcode size")
except (ImportError, AttributeError):  # pragma: no cover - another Python implementation
    _sre = None
    _MAGIC = ""


def _key() -> str:
    return cache.key_of(_VERSION, sys.version, sys.implementation.cache_tag or "", _MAGIC)


def _valid(table: Any) -> bool:
    if not isinstance(table, dict) or len(table) > _MAX_ENTRIES:
        return False
    for k, v in table.items():
        if not (
            isinstance(k, tuple)
            and len(k) == 2
            and isinstance(k[0], str | bytes)
            and isinstance(k[1], int)
            and isinstance(v, tuple)
            and len(v) == 5
            and isinstance(v[0], int)
            and isinstance(v[1], bytes)
            and len(v[1]) % _CODE_SIZE == 0
            and isinstance(v[2], int)
            and isinstance(v[3], dict)
            and isinstance(v[4], tuple)
        ):
            return False
    return True


def _load() -> dict[tuple[str | bytes, int], _Entry]:
    global _table, _owner
    if _table is None:
        table: Any = {}
        blob = cache.read(_NAMESPACE, _key()) if _sre is not None else None
        if blob is not None:
            try:
                table = marshal.loads(blob)
            except (ValueError, EOFError, TypeError):
                table = {}
            if not _valid(table):
                log.debug("regex cache: not a table of ours; ignored")
                table = {}
        _table, _owner = table, os.getpid()
        atexit.register(_save)
    return _table


def _save() -> None:
    """Write the table back when this process learnt patterns (never from a forked child:
    its parent writes what it learnt itself)."""
    if _table is None or not _added or os.getpid() != _owner:
        return
    try:
        blob = marshal.dumps(_table)
    except ValueError:
        return
    cache.write(_NAMESPACE, _key(), blob, keep=_KEEP)


def _entry(pattern: str | bytes, flags: int) -> _Entry:
    """What ``re._compiler.compile`` hands ``_sre.compile`` for ``pattern``."""
    parsed = _parser.parse(pattern, flags)
    code = _compiler._code(parsed, flags)
    groupindex = dict(parsed.state.groupdict)
    indexgroup: list[str | None] = [None] * parsed.state.groups
    for name, i in groupindex.items():
        indexgroup[i] = name
    return (
        int(flags | parsed.state.flags),
        array.array(_CODE, code).tobytes(),
        parsed.state.groups - 1,
        groupindex,
        tuple(indexgroup),
    )


def _remember(key: tuple[str | bytes, int], made: _Entry) -> None:
    """Keep ``made`` in the table (the caller holds ``_lock``) unless it is full."""
    global _added
    assert _table is not None
    if _room(key):
        _table[key] = made
        _added += 1


def _room(key: tuple[str | bytes, int]) -> bool:
    """The table may learn ``key``: a full one learns nothing, so nothing is parsed for it."""
    assert _table is not None
    return key in _table or len(_table) < _MAX_ENTRIES


@overload
def compile(pattern: str, flags: int | re.RegexFlag = 0) -> re.Pattern[str]: ...
@overload
def compile(pattern: bytes, flags: int | re.RegexFlag = 0) -> re.Pattern[bytes]: ...
def compile(pattern: str | bytes, flags: int | re.RegexFlag = 0) -> re.Pattern[Any]:
    """``re.compile(pattern, flags)``, from the table when this Python compiled it before.
    A pattern the table lacks is parsed once: its opcodes are learnt and compiled."""
    flags = int(flags)
    if _sre is None or flags & re.DEBUG:
        return re.compile(pattern, flags)
    key = (pattern, flags)
    with _lock:
        entry = _load().get(key)
        room = _room(key)
    if entry is not None:
        try:
            return _compiled(pattern, entry)
        except (RuntimeError, TypeError, ValueError, OverflowError, IndexError):
            log.debug("regex cache: entry for %r rejected; compiled again", pattern)
    if not room:
        return re.compile(pattern, flags)
    try:
        made = _entry(pattern, flags)  # raises re.error for a bad pattern, as re.compile
        compiled = _compiled(pattern, made)
    except re.error:
        raise
    except Exception:  # internals of another Python: compiled as always, not learnt
        return re.compile(pattern, flags)
    with _lock:
        _remember(key, made)
    return compiled


def _compiled(pattern: str | bytes, entry: _Entry) -> re.Pattern[Any]:
    """The pattern object ``_sre`` makes of ``entry`` (it validates the opcodes)."""
    flags, code, groups, groupindex, indexgroup = entry
    ops = array.array(_CODE, code).tolist()
    return _sre.compile(pattern, flags, ops, groups, groupindex, indexgroup)  # type: ignore[no-any-return]


def learn(patterns: Iterable[str | bytes], flags: int | re.RegexFlag = 0) -> None:
    """Add the opcodes of those ``patterns`` (compiled with ``flags``) the table lacks,
    compiling nothing else: what a process learns for the patterns its forked workers
    compile."""
    if _sre is None:
        return
    flags = int(flags)
    with _lock:
        table = _load()
        missing = [p for p in patterns if (p, flags) not in table]
    for p in missing:
        try:
            made = _entry(p, flags)
        except Exception:  # a bad pattern is reported where it is compiled
            continue
        with _lock:
            _remember((p, flags), made)


__all__ = ["compile", "learn"]
