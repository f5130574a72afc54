"""Findings become incidents, grouped by (category, subject), with a lifecycle.

A root finding opens an incident or joins the active one of its category and
subject ("server" matches any subject: a line that does not name its device).
A symptom joins the newest active incident; alone, it opens one of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from ascend_doctor.core.config import IncidentsConfig
from ascend_doctor.core.events import Finding, Incident, IncidentState, Role
from ascend_doctor.core.store import Store

log = logging.getLogger(__name__)

ACTIVE = (IncidentState.OPEN, IncidentState.MITIGATING)


class IncidentManager:
    """Turns findings into incidents and says which incidents need a remediation decision."""

    def __init__(
        self, store: Store, config: IncidentsConfig, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.config = config
        self._clock = clock
        self.last_start = 0.0  # wall time the server was last started

    def note_start(self, at: float) -> None:
        """The server was (re)started at ``at``: later root findings mean a step did not help."""
        self.last_start = at

    def ingest(self, findings: Iterable[Finding]) -> list[int]:
        """Store findings; return ids of incidents that need a remediation decision."""
        ordered = sorted(findings, key=lambda f: f.role != Role.ROOT)  # roots first, stable
        needs: list[int] = []
        for f in ordered:
            if f.offset >= 0 and self.store.seen_finding(f.file_id or f.path, f.offset, f.rule):
                continue  # delivered again after a restart: already counted
            incident, fresh = self._place(f)
            self.store.add_finding(f, incident.id)
            if f.severity > incident.severity:
                self.store.update_incident(incident.id, severity=f.severity)
            if fresh and incident.id not in needs:
                needs.append(incident.id)
        return needs

    def _place(self, f: Finding) -> tuple[Incident, bool]:
        active = self.store.incidents(states=ACTIVE)
        near = [i for i in active if f.at - i.opened_at <= self.config.window]
        if f.role == Role.ROOT:
            for inc in reversed(active):
                if inc.category == f.category and (
                    inc.subject == f.subject or "server" in (inc.subject, f.subject)
                ):
                    if inc.subject == "server" and f.subject != "server":
                        # a line that names the device makes the incident more precise
                        inc = self.store.update_incident(inc.id, subject=f.subject)
                    return inc, self._recurred(inc, f)
            for inc in reversed(near):
                if inc.state == IncidentState.OPEN and not self.store.actions(inc.id):
                    if not self._has_root(inc):
                        # the cause arrived after its symptom: it becomes the incident's root
                        log.warning("incident %d: root cause is %s", inc.id, f.summary)
                        promoted = self.store.update_incident(
                            inc.id,
                            category=f.category,
                            rule=f.rule,
                            summary=f.summary,
                            subject=f.subject,
                            severity=max(f.severity, inc.severity),
                        )
                        return promoted, True
                    # close in time to an earlier root: evidence of the same failure
                    return inc, False
            return self._open(f), True
        if near:
            return near[-1], False
        for inc in reversed(active):
            if inc.category == f.category:
                return inc, self._recurred(inc, f)
        return self._open(f), True

    def _open(self, f: Finding) -> Incident:
        inc = self.store.open_incident(f)
        log.warning("incident %d opened: %s (%s)", inc.id, f.summary, f.category)
        return inc

    def _has_root(self, inc: Incident) -> bool:
        return any(x["role"] == Role.ROOT.value for x in self.store.findings(inc.id))

    def _recurred(self, inc: Incident, f: Finding) -> bool:
        """A root seen again after the server was restarted by the last step: next step."""
        if inc.state == IncidentState.OPEN:
            return not self.store.actions(inc.id)
        actions = self.store.actions(inc.id)
        last = actions[-1].at if actions else 0.0
        return last <= self.last_start <= f.at


__all__ = ["ACTIVE", "IncidentManager"]
