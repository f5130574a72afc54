"""What ``rules lint`` checks: patterns that can blow up, and the code catalogues.

A rule's pattern runs over untrusted log text, so it must not be able to take time
exponential (or polynomial of high degree) in a line's length: a repeat with no upper bound
that contains another repeat with no upper bound (``(a+)+``, ``(?:\\s*\\w+)*``) is refused,
and so is a backreference (``(?P=name)``, ``\\1``), which hyperscan cannot run either.
Catalogue problems are those :func:`check_catalogues` reports: unknown category, duplicate
code, missing source, missing meaning.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ascend_doctor.rules.catalogue import check_catalogues
from ascend_doctor.rules.loader import Rule
from ascend_doctor.rules.safety import pattern_problems


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
