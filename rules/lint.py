"""What ``rules lint`` checks: patterns that can blow up, and the code catalogues.

A rule's pattern runs over untrusted log text, so it must not be able to take time
exponential (or polynomial of high degree) in a line's length: a repeat with no upper bound
that contains another repeat with no upper bound (``(a+)+``, ``(?:\\s*\\w+)*``) is refused,
and so is a backreference (``(?P=name)``, ``\\1``), which hyperscan cannot run either.
Catalogue problems are those :func:`check_catalogues` reports: unknown category, duplicate
code, missing source, missing meaning.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ascend_doctor.rules.catalogue import check_catalogues
from ascend_doctor.rules.loader import Rule

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
            for branch in arg[1]:
                _walk(list(branch), outer_unbounded=outer_unbounded, problems=problems)
        elif op in (_sre_c.ASSERT, _sre_c.ASSERT_NOT):
            _walk(list(arg[1]), outer_unbounded=outer_unbounded, problems=problems)


def rule_problems(rules: Iterable[Rule]) -> list[str]:
    """Every unsafe pattern of ``rules``, as ``file: rule 'id': why``."""
    out = []
    for rule in rules:
        for why in pattern_problems(rule.pattern):
            out.append(f"{rule.file}: rule '{rule.id}': {why}")
        if rule.quiet_after is not None:
            for why in pattern_problems(rule.quiet_after.pattern.decode("utf-8")):
                out.append(f"{rule.file}: rule '{rule.id}' quiet_after: {why}")
    return out


def catalogue_problems(dirs: list[Path] | None = None) -> list[str]:
    """Every problem of the shipped catalogues and of ``dirs``."""
    return check_catalogues(dirs)[1]


__all__ = ["catalogue_problems", "pattern_problems", "rule_problems"]
