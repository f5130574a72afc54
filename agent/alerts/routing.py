"""Which sinks an incident's transition goes to, and whether a silence holds it back.

Without ``[[alerts.routes]]``: page sinks (PagerDuty by default) get escalated incidents and
critical ones that open or whose remediation failed; notify sinks (everything else by default)
get every transition. With routes, each route that matches category, severity and event adds
its sinks. A resolve or an acknowledge always follows its trigger to the sinks that got it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ascend_doctor.core.config import AlertRouteConfig
from ascend_doctor.core.events import Incident, Severity
from ascend_doctor.core.store import Silence
from ascend_doctor.sinks.base import Sink


def route(
    sinks: Sequence[Sink], routes: Sequence[AlertRouteConfig], incident: Incident, event: str
) -> list[Sink]:
    """The sinks a trigger for ``event`` of ``incident`` goes to, in config order."""
    if not routes:
        return [s for s in sinks if _default(s, incident, event)]
    names: set[str] = set()
    for r in routes:
        if r.categories and incident.category.value not in r.categories:
            continue
        if incident.severity < Severity.parse(r.min_severity):
            continue
        if event not in r.events:
            continue
        names.update(r.sinks)
    return [s for s in sinks if s.name in names]


def _default(sink: Sink, incident: Incident, event: str) -> bool:
    if sink.role == "notify":
        return True
    critical = incident.severity >= Severity.CRITICAL
    return event == "escalated" or (critical and event in ("opened", "remediation_failed"))


def silenced_by(silences: Sequence[Silence], incident: Incident) -> Silence | None:
    """The first running silence that matches the incident, if any."""
    for s in silences:
        if s.category and s.category != incident.category.value:
            continue
        if s.subject and s.subject != incident.subject:
            continue
        return s
    return None


__all__ = ["route", "silenced_by"]
