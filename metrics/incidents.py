"""Incidents and the remediation budget as metrics.

Counters for what happened (incidents opened, incidents ended by state), so that an incident
that opens and resolves between two scrapes is still counted; one gauge for what needs a look
now (incidents being dealt with, and escalated ones nobody has acknowledged yet), which is
what an alert fires on; and the remediation steps left in this hour's budget.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable

from opentelemetry.metrics import Meter

from ascend_doctor.core.events import ACTIVE_STATES, Incident, IncidentState
from ascend_doctor.metrics.observe import Kind, Point, observe, one

_Key = tuple[str, str, str]  # category, severity, state


def needs_attention(incident: Incident) -> bool:
    """Being dealt with by the doctor, or escalated and not yet acknowledged by a human."""
    return incident.state in ACTIVE_STATES or (
        incident.state == IncidentState.ESCALATED and not incident.acknowledged
    )


class IncidentMetrics:
    """``ascend_doctor.incidents*`` and ``ascend_doctor.remediation.budget.remaining``."""

    def __init__(
        self, meter: Meter, *, budget_per_hour: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._active: dict[int, _Key] = {}
        self._seen: set[_Key] = set()
        self._budget = budget_per_hour
        self._steps: tuple[float, ...] = ()
        self._clock = clock
        self.opened = meter.create_counter(
            "ascend_doctor.incidents",
            unit="{incident}",
            description="Incidents opened",
        )
        self.ended = meter.create_counter(
            "ascend_doctor.incidents.ended",
            unit="{incident}",
            description="Incidents that ended: resolved by the doctor, or escalated to a human",
        )
        # MTTR and time between incidents, per category (issue 20): their means
        self.repair_time = meter.create_histogram(
            "ascend_doctor.incidents.repair_time",
            unit="s",
            description="Opened to resolved, per incident the doctor repaired (mean: the MTTR)",
        )
        self.interval = meter.create_histogram(
            "ascend_doctor.incidents.interval",
            unit="s",
            description="Since the previous incident of the category opened",
        )
        self._last_opened: dict[str, float] = {}
        observe(
            meter,
            "ascend_doctor.incidents.active",
            self._active_points,
            unit="{incident}",
            description="Incidents that need attention now: open or mitigating, or escalated "
            "and not acknowledged",
            kind=Kind.UP_DOWN,
        )
        observe(
            meter,
            "ascend_doctor.remediation.budget.remaining",
            self._budget_left,
            unit="{step}",
            description="Remediation steps the host budget still allows in the last hour",
        )

    def _active_points(self) -> list[Point]:
        counts = Counter(self._active.copy().values())
        # a group seen before reports 0, so a dashboard shows the incident ending
        return [
            (counts.get(key, 0), {"category": key[0], "severity": key[1], "state": key[2]})
            for key in sorted(self._seen | set(counts))
        ]

    def _budget_left(self) -> list[Point]:
        now = self._clock()
        used = sum(1 for at in self._steps if now - at < 3600)
        return one(max(0, self._budget - used))

    def track(self, incident: Incident) -> None:
        """Know an incident's current state (every change, and those open at start-up)."""
        if needs_attention(incident):
            key = (incident.category.value, incident.severity.label, incident.state.value)
            self._active[incident.id] = key
            self._seen.add(key)
        else:
            self._active.pop(incident.id, None)

    def changed(self, before: Incident | None, after: Incident) -> None:
        """An incident opened or changed (as the store recorded it)."""
        attrs = {"category": after.category.value, "severity": after.severity.label}
        category = {"category": after.category.value}
        if before is None:
            self.opened.add(1, attrs)
            last = self._last_opened.get(after.category.value)
            if last is not None:
                self.interval.record(max(0.0, after.opened_at - last), category)
            self._last_opened[after.category.value] = max(after.opened_at, last or 0.0)
        repaired = after.state == IncidentState.RESOLVED and after.resolved_at is not None
        if repaired and (before is None or before.state != after.state):
            self.repair_time.record((after.resolved_at or 0.0) - after.opened_at, category)
        final = (IncidentState.RESOLVED, IncidentState.ESCALATED)
        if after.state in final and (before is None or before.state != after.state):
            self.ended.add(1, {**attrs, "state": after.state.value})
        self.track(after)

    def budget_used(self, steps: Iterable[float]) -> None:
        """The wall times of the steps the budget has booked (the store's ledger)."""
        self._steps = tuple(steps)


__all__ = ["IncidentMetrics", "needs_attention"]
