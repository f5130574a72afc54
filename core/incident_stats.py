"""Mean time to repair and mean time between incidents, per category: how often a failure
comes back and how long the doctor takes to fix it, from the incidents the store kept."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from ascend_doctor.core.events import Incident, IncidentState


@dataclass(frozen=True)
class CategoryStats:
    """One category's record."""

    incidents: int
    """Incidents of the category."""
    resolved: int
    """Of them, resolved (healthy again, verified)."""
    mttr_s: float | None
    """Mean seconds from opened to resolved (None: none resolved yet)."""
    mtbi_s: float | None
    """Mean seconds between one incident opening and the next (None: fewer than two)."""


def category_stats(incidents: Iterable[Incident]) -> dict[str, CategoryStats]:
    """Per category, sorted by name. Escalated incidents count as incidents but not as
    repairs: a human fixed them, when the doctor cannot tell."""
    by: dict[str, list[Incident]] = {}
    for inc in incidents:
        by.setdefault(inc.category.value, []).append(inc)
    out = {}
    for category, incs in sorted(by.items()):
        repairs = [
            i.resolved_at - i.opened_at
            for i in incs
            if i.state == IncidentState.RESOLVED and i.resolved_at is not None
        ]
        opened = sorted(i.opened_at for i in incs)
        gaps = [b - a for a, b in pairwise(opened)]
        out[category] = CategoryStats(
            len(incs),
            len(repairs),
            round(sum(repairs) / len(repairs), 1) if repairs else None,
            round(sum(gaps) / len(gaps), 1) if gaps else None,
        )
    return out


__all__ = ["CategoryStats", "category_stats"]
