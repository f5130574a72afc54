"""Patterns that can take a line's worth of time to the power of two or more, refused.

A rule's pattern runs over untrusted log text, so it must not be able to take time
exponential (or polynomial of high degree) in a line's length: a repeat with no upper bound
that contains another repeat with no upper bound (``(a+)+``, ``(?:\\s*\\w+)*``) is refused,
and so is a pattern that begins with an unbounded repeat (``\\S+ does not appear``: a search
retries it at every byte of a run), and a backreference (``(?P=name)``, ``\\1``), which
hyperscan cannot run either. The
rule loader refuses such a pattern at start-up (file, line, why) and ``rules lint`` names it;
what stays (a single unbounded repeat, ``A.*Z``) is bounded by the engine's line cap
(:data:`ascend_doctor.rules.matcher.MAX_LINE`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from typing import Any

# Python's own regex parser: the tree the compiler sees, so the check matches what runs.
_sre_p: Any = importlib.import_module("re._parser")
_sre_c: Any = importlib.import_module("re._constants")

_UNBOUNDED = _sre_c.MAXREPEAT
_REPEATS = {_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT, getattr(_sre_c, "POSSESSIVE_REPEAT", None)}
_REFS = {_sre_c.GROUPREF, _sre_c.GROUPREF_EXISTS}


def pattern_problems(pattern: str) -> list[str]:
    """Why ``pattern`` is unsafe to run over untrusted lines (empty when it is safe)."""
    try:
        tree = _sre_p.parse(pattern)
    except re.error as exc:
        return [f"does not compile: {exc}"]
    problems: list[str] = []
    _walk(list(tree), outer_unbounded=False, problems=problems)
    if _leading_unbounded(list(tree)):
        problems.append(
            "begins with an unbounded repeat (such as \\S+ does not...): a search retries it "
            "at every byte of a run, the square of the line; bound it (\\S{1,200})"
        )
    return sorted(set(problems))


def _walk(items: Iterable[Any], *, outer_unbounded: bool, problems: list[str]) -> None:
    for op, arg in items:
        if op in _REFS:
            problems.append("backreference: cannot run in linear time (nor in hyperscan)")
        elif op in _REPEATS:
            _, high, sub = arg
            unbounded = high == _UNBOUNDED
            if unbounded and outer_unbounded:
                problems.append(
                    "nested unbounded quantifiers (such as (a+)+): bound the inner or outer one"
                )
            _walk(list(sub), outer_unbounded=outer_unbounded or unbounded, problems=problems)
        elif op == _sre_c.SUBPATTERN:
            _walk(list(arg[-1]), outer_unbounded=outer_unbounded, problems=problems)
        elif op == _sre_c.BRANCH:
            if outer_unbounded and _overlap(arg[1]):
                problems.append(
                    "alternatives that can match the same text inside an unbounded repeat "
                    "(such as (a|aa)*): make them start differently or bound the repeat"
                )
            for branch in arg[1]:
                _walk(list(branch), outer_unbounded=outer_unbounded, problems=problems)
        elif op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT):
            _walk(list(arg[1]), outer_unbounded=outer_unbounded, problems=problems)


def _leading_unbounded(items: list[Any]) -> bool:
    """Whether the text a search tries first at each position may be an unbounded repeat:
    ``\\S+ does not appear`` reads a 32 KiB run of non-blanks to its end from each of its
    bytes. An anchor (``^``) or a literal first makes the retries cheap."""
    for op, arg in items:
        if op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT):
            if _leading_unbounded(list(arg[1])):
                return True  # a lookahead (?=\S+ x) is tried at every position too
            continue  # zero width: what follows is tried at the same position
        if op in _REPEATS:
            low, high, sub = arg
            if high == _UNBOUNDED or _leading_unbounded(list(sub)):
                return True
            if low > 0:
                return False
            continue  # optional: what follows may lead too
        if op == _sre_c.SUBPATTERN:
            sub = list(arg[-1])
            if _leading_unbounded(sub):
                return True
            if not _skippable(sub):
                return False
            continue
        if op == _sre_c.BRANCH:
            if any(_leading_unbounded(list(b)) for b in arg[1]):
                return True
            if not any(_skippable(list(b)) for b in arg[1]):
                return False
            continue
        return False  # a literal, a class, an anchor: a cheap first step
    return False


def _skippable(items: list[Any]) -> bool:
    """Whether ``items`` may match nothing at an arbitrary position. Unlike the empty flag
    of :func:`_first`, an anchor is not skippable: it holds only at a line's start or end,
    so what follows it is not retried at every byte."""
    for op, arg in items:
        if op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT):
            continue
        if op in _REPEATS and arg[0] == 0:
            continue
        if op == _sre_c.SUBPATTERN and _skippable(list(arg[-1])):
            continue
        if op == _sre_c.BRANCH and any(_skippable(list(b)) for b in arg[1]):
            continue
        return False
    return True


def _overlap(branches: list[Any]) -> bool:
    """Whether two alternatives may begin with the same character (or one may match
    nothing): the repeat around them can then split one text in exponentially many ways."""
    seen: set[int] = set()
    for branch in branches:
        first, empty = _first(list(branch))
        if first is None or empty or seen & first:
            return True
        seen |= first
    return False


_ANY_FIRST: tuple[set[int] | None, bool] = (None, False)


def _first(items: list[Any]) -> tuple[set[int] | None, bool]:
    """The characters ``items`` may begin with (None: too many to tell) and whether they
    may match the empty string."""
    out: set[int] = set()
    for op, arg in items:
        first, empty = _first_one(op, arg)
        if first is None:
            return None, False
        out |= first
        if not empty:
            return out, False
    return out, True


def _first_one(op: Any, arg: Any) -> tuple[set[int] | None, bool]:
    if op == _sre_c.LITERAL:
        return {arg}, False
    if op == _sre_c.IN:
        chars: set[int] = set()
        for kind, value in arg:
            if kind == _sre_c.LITERAL:
                chars.add(value)
            elif kind == _sre_c.RANGE and value[1] - value[0] < 256:
                chars.update(range(value[0], value[1] + 1))
            else:  # a negated set, a category (\w, \d): it may begin with much
                return _ANY_FIRST
        return chars, False
    if op == _sre_c.SUBPATTERN:
        return _first(list(arg[-1]))
    if op in _REPEATS:
        first, empty = _first(list(arg[2]))
        return first, empty or arg[0] == 0
    if op == _sre_c.BRANCH:
        out: set[int] = set()
        any_empty = False
        for branch in arg[1]:
            first, empty = _first(list(branch))
            if first is None:
                return _ANY_FIRST
            out |= first
            any_empty = any_empty or empty
        return out, any_empty
    if op in (_sre_c.AT, _sre_c.ASSERT, _sre_c.ASSERT_NOT):
        return set(), True
    return _ANY_FIRST  # any character, a backreference, a conditional: assume the worst


__all__ = ["pattern_problems"]
