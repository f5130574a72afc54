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
from collections.abc import Sequence
from typing import Any, Protocol

from ascend_doctor.rules.loader import Rule

log = logging.getLogger(__name__)

_NAMED_GROUP = re.compile(r"\(\?P<\w+>")
_NAMED_REF = re.compile(r"\(\?P=\w+\)")


class Prefilter(Protocol):
    """Proposes (rule index, line start) candidates in a chunk."""

    name: str

    def candidates(self, data: bytes) -> list[tuple[int, int]]:
        """(rule index, byte offset of the line start) pairs, each at most once."""
        ...


def hyperscan_pattern(pattern: str) -> bytes:
    """The pattern as hyperscan reads it: named groups become plain groups."""
    return _NAMED_GROUP.sub("(", pattern).encode("utf-8")


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
        db.compile(expressions=[hyperscan_pattern(pattern)], ids=[0], elements=1, flags=[0])
    except hyperscan.error as exc:
        return str(exc)
    return None


def _line_start(data: bytes, pos: int) -> int:
    return data.rfind(b"\n", 0, pos) + 1


class RePrefilter:
    """Each rule's regex over the whole chunk (C speed), a candidate at each match's last line."""

    name = "re"

    def __init__(self, rules: Sequence[Rule], extras: Sequence[str] = ()) -> None:
        self.rules = list(rules)
        self._regexes = [r.regex for r in self.rules] + [
            re.compile(e.encode("utf-8")) for e in extras
        ]

    def candidates(self, data: bytes) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for i, regex in enumerate(self._regexes):
            last = -1
            for m in regex.finditer(data):
                # the line where the match ends: what hyperscan reports without start-of-match
                start = _line_start(data, max(m.start(), m.end() - 1))
                if start != last:
                    out.append((i, start))
                    last = start
        return out


class HyperscanPrefilter:
    """One hyperscan database of every rule of a source; one scan per chunk."""

    name = "hyperscan"

    def __init__(self, rules: Sequence[Rule], extras: Sequence[str] = ()) -> None:
        import hyperscan

        self.rules = list(rules)
        self._db: Any = None
        patterns = [r.pattern for r in self.rules] + list(extras)
        if not patterns:
            return
        db = hyperscan.Database()
        db.compile(
            expressions=[hyperscan_pattern(p) for p in patterns],
            ids=list(range(len(patterns))),
            elements=len(patterns),
            flags=[0] * len(patterns),
        )
        self._db = db
        self._scratch = hyperscan.Scratch(db)

    def candidates(self, data: bytes) -> list[tuple[int, int]]:
        if self._db is None:
            return []
        seen: set[tuple[int, int]] = set()
        out: list[tuple[int, int]] = []

        def on_match(rule: int, start: int, end: int, flags: int, ctx: object) -> None:
            key = (rule, _line_start(data, max(start, end - 1)))
            if key not in seen:
                seen.add(key)
                out.append(key)

        self._db.scan(data, match_event_handler=on_match, scratch=self._scratch)
        return out


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
]
