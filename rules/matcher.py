"""Multi-pattern prefilters: which (rule, line) pairs of a chunk are worth a closer look.

Two paths with one meaning. A rule matches a line when its Python ``re`` pattern
``search``es that line. The ``hyperscan`` path scans a chunk once for every
pattern of a source; the ``re`` path (the reference semantics, and the fallback
where hyperscan is not installed) runs each pattern over the chunk once. Both
only propose candidate lines; the rule's own regex confirms each one on its line,
so both paths give identical findings.
"""

from __future__ import annotations

import logging
import re
import re._parser as re_parser  # type: ignore[import-not-found]  # no stub; sre_parse warns
from collections.abc import Sequence
from typing import Any, Protocol

from ascend_doctor.core import regex
from ascend_doctor.rules.loader import RULE_FLAGS, Rule

log = logging.getLogger(__name__)

_NAMED_GROUP = regex.compile(r"\(\?P<\w+>")
_NAMED_REF = regex.compile(r"\(\?P=\w+\)")


class Prefilter(Protocol):
    """Proposes (rule index, line start) candidates in a chunk."""

    name: str

    def candidates(self, data: bytes) -> list[tuple[int, int]]:
        """(rule index, byte offset of the line start) pairs, each at most once."""
        ...


def hyperscan_pattern(pattern: str) -> bytes:
    """The pattern as hyperscan reads it: named groups become plain groups."""
    return _NAMED_GROUP.sub("(", pattern).encode("utf-8")


_PREFIXES = "prefix-1 multiline"
"""Names how :func:`prefix_pattern` cuts and the flags patterns compile with: part of the
cache key of compiled databases."""
_QUANTIFIER = regex.compile(r"(?:[*+?]|\{\d*(?:,\d*)?\})[?+]?")


def _atom_end(p: str, i: int) -> int | None:
    """Where the atom starting at ``p[i]`` ends; None at a top-level ``|`` or ``)``."""
    c = p[i]
    if c in "|)":
        return None
    if c == "\\":
        return i + 2
    if c == "[":
        j = i + 1
        if j < len(p) and p[j] == "^":
            j += 1
        if j < len(p) and p[j] == "]":
            j += 1
        while j < len(p) and p[j] != "]":
            j += 2 if p[j] == "\\" else 1
        return j + 1
    if c == "(":
        depth, j = 0, i
        while j < len(p):
            if p[j] == "\\":
                j += 2
                continue
            if p[j] == "[":
                j = _atom_end(p, j) or len(p)
                continue
            depth += {"(": 1, ")": -1}.get(p[j], 0)
            j += 1
            if depth == 0:
                return j
        return None
    return i + 1


def prefix_pattern(pattern: str) -> str:
    """The pattern cut after its last top-level item of fixed, non-zero width.

    A line the pattern matches holds a match of every prefix of its top-level sequence, so
    the prefix proposes every line the pattern would (the rule's own regex then confirms
    each one), but a trailing ``(?P<detail>[^\\n]{0,160})`` no longer reports a match at
    every byte it could end at. A pattern with a top-level ``|`` or that does not read as
    expected, or whose cut part holds an end anchor, is returned whole.
    """
    items: list[str] = []
    i = 0
    while i < len(pattern):
        end = _atom_end(pattern, i)
        if end is None or end > len(pattern):
            return pattern
        q = _QUANTIFIER.match(pattern, end)
        end = q.end() if q else end
        items.append(pattern[i:end])
        i = end
    keep = 0
    for n, item in enumerate(items):
        try:
            low, high = re_parser.parse(item).getwidth()
        except (re.error, OverflowError):
            return pattern  # an item cut wrongly (a group reference, a flag): no relaxation
        if low == high and low > 0:
            keep = n + 1
    tail = "".join(items[keep:])
    if not keep or "$" in tail or "\\Z" in tail:
        return pattern  # an end anchor (a line's end: RULE_FLAGS) cut off would go unchecked
    return "".join(items[:keep])


def hyperscan_error(pattern: str) -> str | None:
    """Why hyperscan cannot compile ``pattern`` (None when it can, or is not installed)."""
    try:
        import hyperscan
    except ImportError:
        return None
    if _NAMED_REF.search(pattern):
        return "backreferences are not supported by hyperscan"
    db = hyperscan.Database()
    try:
        db.compile(
            expressions=[hyperscan_pattern(pattern)],
            ids=[0],
            elements=1,
            flags=[hyperscan.HS_FLAG_MULTILINE],
        )
    except hyperscan.error as exc:
        return str(exc)
    return None


MAX_LINE = 32768
"""A rule's regex looks at most this many bytes of a line (on either matching path): a pattern
such as ``error[^\\n]*memory`` costs the square of the length it searches, and a hostile
line (a 256 KiB prompt) must not cost seconds."""


def capped(data: bytes) -> bytes:
    """``data`` with every line's bytes past :data:`MAX_LINE` turned into newlines: the same
    length and offsets, so a match's position means the same in both; nothing past the cap can
    match or be searched through."""
    lines = data.split(b"\n")
    if not any(len(line) > MAX_LINE for line in lines):
        return data
    return b"\n".join(
        line if len(line) <= MAX_LINE else line[:MAX_LINE] + b"\n" * (len(line) - MAX_LINE)
        for line in lines
    )


def _line_start(data: bytes, pos: int) -> int:
    return data.rfind(b"\n", 0, pos) + 1


class RePrefilter:
    """Each rule's regex over the whole chunk (C speed), a candidate at each match's last line."""

    name = "re"

    def __init__(self, rules: Sequence[Rule], extras: Sequence[str] = ()) -> None:
        self.rules = list(rules)
        self._regexes = [r.regex for r in self.rules] + [
            regex.compile(e.encode("utf-8"), RULE_FLAGS) for e in extras
        ]

    def candidates(self, data: bytes) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        data = capped(data)
        for i, rx in enumerate(self._regexes):
            last = -1
            for m in rx.finditer(data):
                # the line where the match ends: what hyperscan reports without start-of-match
                start = _line_start(data, max(m.start(), m.end() - 1))
                first = _line_start(data, m.start())
                if first != start and first != last:
                    # a match across lines (a pattern's \s before its $) may hold one within
                    # its first line, which hyperscan reports by that shorter match's end
                    out.append((i, first))
                    last = first
                if start != last:
                    out.append((i, start))
                    last = start
        return out


class HyperscanPrefilter:
    """One hyperscan database of every rule of a source; one scan per chunk.

    The database holds each pattern's :func:`prefix_pattern` (a rule ending in a capture
    such as ``(?P<detail>[^\\n]{0,160})`` would otherwise call back once per byte of it);
    it is compiled once per pattern list and kept in the cache (:mod:`core.cache`).
    """

    name = "hyperscan"

    def __init__(self, rules: Sequence[Rule], extras: Sequence[str] = ()) -> None:
        import hyperscan

        self.rules = list(rules)
        self._db: Any = None
        patterns = [r.pattern for r in self.rules] + list(extras)
        self._patterns = len(patterns)
        if not patterns:
            return
        self._db = _database(patterns)
        self._scratch = hyperscan.Scratch(self._db)

    def candidates(self, data: bytes) -> list[tuple[int, int]]:
        if self._db is None:
            return []
        out: list[tuple[int, int]] = []
        # per pattern, the end (one past the newline) of the line of its last candidate:
        # matches come in order of their end, so a match ending before it is the same line
        # (a list, not a dict: the callback runs for every match, many per line in a
        # failure-dense log)
        line_end = [-1] * self._patterns
        size = len(data)
        find, rfind, append = data.find, data.rfind, out.append

        def on_match(rule: int, start: int, end: int, flags: int, ctx: object) -> None:
            if end <= line_end[rule]:
                return
            at = end - 1 if end - 1 > start else start
            nl = find(b"\n", at)
            line_end[rule] = size if nl < 0 else nl + 1
            append((rule, rfind(b"\n", 0, at) + 1))

        self._db.scan(data, match_event_handler=on_match, scratch=self._scratch)
        return out


def _database(patterns: list[str]) -> Any:
    """The block-mode database of the patterns' prefixes, from the cache or compiled (then
    cached). Should the prefixes not compile, the patterns themselves are compiled."""
    import hyperscan

    from ascend_doctor.core import cache

    version = getattr(hyperscan, "__version__", "") or _dist_version("hyperscan")
    key = cache.key_of("hyperscan-block", _PREFIXES, version, *patterns)
    blob = cache.read("hyperscan", key)
    if blob is not None:
        try:
            return hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK)
        except Exception as exc:  # another CPU, another library: rebuilt below
            log.debug("cached hyperscan database not usable (%s); compiling", exc)
    db = hyperscan.Database()
    try:
        _compile(db, [prefix_pattern(p) for p in patterns])
    except hyperscan.error:
        _compile(db, patterns)
    cache.write("hyperscan", key, hyperscan.dumpb(db))
    return db


def _compile(db: Any, expressions: list[str]) -> None:
    import hyperscan

    encoded = [hyperscan_pattern(p) for p in expressions]
    # ^ and $ at every line, as the rules' own regexes read them (rules/loader.py RULE_FLAGS)
    db.compile(
        expressions=encoded,
        ids=list(range(len(encoded))),
        elements=len(encoded),
        flags=[hyperscan.HS_FLAG_MULTILINE] * len(encoded),
    )


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return ""


def make_prefilter(rules: Sequence[Rule], mode: str, extras: Sequence[str] = ()) -> Prefilter:
    """``auto`` picks hyperscan when installed and every pattern compiles, else ``re``.

    ``extras`` are further patterns scanned in the same pass; their candidates carry the
    index ``len(rules) + k`` (the engine uses them to find lines with codes and error lines).
    """
    if mode == "re":
        return RePrefilter(rules, extras)
    try:
        return HyperscanPrefilter(rules, extras)
    except ImportError:
        if mode == "hyperscan":
            raise
    except Exception as exc:  # a pattern hyperscan rejects: lint names it
        if mode == "hyperscan":
            raise
        log.warning("hyperscan cannot compile the rules (%s); using Python re", exc)
    return RePrefilter(rules, extras)


__all__ = [
    "HyperscanPrefilter",
    "Prefilter",
    "RePrefilter",
    "hyperscan_error",
    "hyperscan_pattern",
    "make_prefilter",
    "prefix_pattern",
]
