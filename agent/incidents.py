"""Findings become incidents, grouped by (category, subject), with a lifecycle; the
:class:`IncidentManager` is the one owner of incident state.

A root finding opens an incident or joins the active one of its category and
subject ("server" matches any subject: a line that does not name its device).
A symptom joins the newest active incident; alone, it opens one of its own. Either, with no
active incident to join, joins the closed incident of its fault: one fault, one page.

Every change of an incident goes through the manager: a step taken, an escalation, a
resolution, an acknowledgement, a root that arrived after its symptom. A change of state is
checked against :data:`TRANSITIONS`; anything else is a bug and raises.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from ascend_doctor.core.config import IncidentsConfig
from ascend_doctor.core.errors import RemediationError
from ascend_doctor.core.events import (
    ACTIVE_STATES,
    Category,
    Finding,
    Incident,
    IncidentState,
    Outcome,
    Role,
)
from ascend_doctor.core.store import Store
from ascend_doctor.rules.infer import as_unrecognised

log = logging.getLogger(__name__)

TRANSITIONS: dict[IncidentState, frozenset[IncidentState]] = {
    # open -> mitigating: a step changed something and the server restarts with it
    # open -> escalated: no step left, the policy refused, or a step failed
    # open -> resolved: the failure went away on its own before any step (verified)
    IncidentState.OPEN: frozenset(
        {IncidentState.MITIGATING, IncidentState.ESCALATED, IncidentState.RESOLVED}
    ),
    # mitigating -> mitigating: the next step after one that did not help
    IncidentState.MITIGATING: frozenset(
        {IncidentState.MITIGATING, IncidentState.RESOLVED, IncidentState.ESCALATED}
    ),
    # resolved and escalated are final: a failure that comes back opens a new incident
    IncidentState.RESOLVED: frozenset(),
    IncidentState.ESCALATED: frozenset(),
}
"""The allowed changes of an incident's state."""


class IncidentStateError(RemediationError):
    """A change of an incident's state that the lifecycle does not allow (a bug)."""


class IncidentManager:
    """Turns findings into incidents and says which incidents need a remediation decision."""

    def __init__(
        self,
        store: Store,
        config: IncidentsConfig,
        clock: Callable[[], float] = time.time,
        *,
        server: str = "server",
    ) -> None:
        self.server = server
        """The subject of a finding that names no device (``server NAME`` with several)."""
        self.optional: frozenset[str] = frozenset()
        """The registry's optional actions (diagnostics), recorded but deciding nothing: the
        remediator names them (this module does not import its registry)."""
        self.store = store
        self.config = config
        self._clock = clock
        self.last_start = 0.0  # wall time the server was last started

    def note_start(self, at: float) -> None:
        """The server was (re)started at ``at``: later root findings mean a step did not help."""
        self.last_start = at

    def ingest(self, findings: Iterable[Finding]) -> list[int]:
        """Store findings; return ids of incidents that need a remediation decision."""
        # a category inferred from an error's words (rules/infer.py) is filed as what it is,
        # an unrecognised error: never remediated, paged only as one (its summary names the
        # likely family)
        ordered = sorted(
            (as_unrecognised(f) for f in findings), key=lambda f: f.role != Role.ROOT
        )  # roots first, stable
        needs: list[int] = []
        for f in ordered:
            if f.subject == "server" and self.server != "server":
                f = replace(f, subject=self.server)
            if f.offset >= 0 and self.store.seen_finding(f.file_id or f.path, f.offset, f.rule):
                continue  # delivered again after a restart: already counted
            incident, fresh = self._place(f)
            self.store.add_finding(f, incident.id)
            if f.severity > incident.severity:
                self.store.update_incident(incident.id, severity=f.severity)
            # an unknown error is never remediated (it pages only if routes say so): its
            # incident is never due, so a burst of them stays one open incident with a count
            if fresh and incident.id not in needs and incident.category != Category.UNRECOGNISED:
                needs.append(incident.id)
        return needs

    def _place(self, f: Finding) -> tuple[Incident, bool]:
        active = self.store.incidents(states=ACTIVE_STATES)
        near = [i for i in active if f.at - i.opened_at <= self.config.window]
        if f.role == Role.ROOT:
            for inc in reversed(active):
                if inc.category == f.category and (
                    inc.subject == f.subject or self.server in (inc.subject, f.subject)
                ):
                    if inc.subject == self.server and f.subject != self.server:
                        # a line that names the device makes the incident more precise
                        inc = self.store.update_incident(inc.id, subject=f.subject)
                    return inc, self._recurred(inc, f)
            for inc in reversed(near):
                if inc.state == IncidentState.OPEN and self._undecided(inc):
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
                            plan=f.remediation,
                        )
                        return promoted, True
                    # close in time to an earlier root: evidence of the same failure
                    return inc, False
            return self._closed_or_new(f)
        if near:
            return near[-1], False
        for inc in reversed(active):
            if inc.category == f.category:
                return inc, self._recurred(inc, f)
        return self._closed_or_new(f, symptom=True)

    def _closed_or_new(self, f: Finding, *, symptom: bool = False) -> tuple[Incident, bool]:
        """The closed incident this finding is more evidence of (a symptom: of any category; a
        root: of its category and subject), else a new one. An escalated incident nobody
        acknowledged takes its fault while it recurs within ``window`` of its last evidence
        (each failed start, npu-smi after a doctor restart, whichever source comes last); a
        resolved one only evidence older than the verification that closed it."""
        closed = (IncidentState.ESCALATED, IncidentState.RESOLVED)
        for inc in reversed(self.store.incidents(states=closed, newest=20)):
            same = inc.category == f.category and (
                inc.subject == f.subject or self.server in (inc.subject, f.subject)
            )
            if not same and not symptom:
                continue
            end = inc.resolved_at if inc.resolved_at is not None else inc.opened_at
            if inc.state == IncidentState.RESOLVED:
                if same and f.at <= end:
                    return inc, False
                continue
            last = max([end, *(x.finding.at for x in self.store.findings(inc.id))])
            if not inc.acknowledged and f.at - last <= self.config.window:
                return inc, False  # acknowledged: what comes next is the human's to see anew
        return self._open(f), True

    # -- lifecycle ---------------------------------------------------------------------------

    def stepped(self, incident_id: int, *, applied: bool) -> Incident:
        """A remediation step was decided: the next one is due next time; ``applied`` (a change
        the server restarts with) makes the incident mitigating."""
        inc = self.store.incident(incident_id)
        fields: dict[str, object] = {"step": inc.step + 1, "attempts": inc.attempts + 1}
        if applied:
            self._check(inc, IncidentState.MITIGATING)
            fields["state"] = IncidentState.MITIGATING
        return self.store.update_incident(incident_id, **fields)

    def escalate(self, incident_id: int, why: str) -> Incident:
        """The incident goes to a human."""
        inc = self.store.incident(incident_id)
        self._check(inc, IncidentState.ESCALATED)
        log.error("incident %d escalated: %s", incident_id, why)
        return self.store.update_incident(
            incident_id, state=IncidentState.ESCALATED, resolved_at=self._clock()
        )

    def resolve(self, incident_id: int, why: str) -> Incident:
        """Verified healthy: the incident is over."""
        inc = self.store.incident(incident_id)
        self._check(inc, IncidentState.RESOLVED)
        log.warning("incident %d resolved: %s", incident_id, why)
        return self.store.update_incident(
            incident_id, state=IncidentState.RESOLVED, resolved_at=self._clock()
        )

    def acknowledge(self, incident_id: int) -> Incident:
        """An operator has seen it (any state)."""
        return self.store.update_incident(incident_id, acknowledged=True)

    @staticmethod
    def _check(inc: Incident, to: IncidentState) -> None:
        if to not in TRANSITIONS[inc.state]:
            raise IncidentStateError(
                f"incident {inc.id} cannot go from {inc.state.value} to {to.value}"
            )

    def _open(self, f: Finding) -> Incident:
        inc = self.store.open_incident(f)
        log.warning("incident %d opened: %s (%s)", inc.id, f.summary, f.category)
        return inc

    def _undecided(self, inc: Incident) -> bool:
        """Nothing has acted on the incident yet: no step counted, and what is recorded only
        waited (a hold for a second signal, a cooldown, remediation off: refusals) or looked
        (the optional diagnostics). A root that arrives after its symptom may then still give
        the incident its category and plan; once a step ran, the plan it started stays."""
        return inc.step == 0 and all(
            a.outcome == Outcome.REFUSED or a.name in self.optional
            for a in self.store.actions(inc.id)
        )

    def _has_root(self, inc: Incident) -> bool:
        return any(x.finding.role == Role.ROOT for x in self.store.findings(inc.id))

    def _recurred(self, inc: Incident, f: Finding) -> bool:
        """A root seen again after the server was restarted by the last step: next step."""
        actions = self.store.actions(inc.id)
        if inc.state == IncidentState.OPEN:
            # undecided: no action, or only the optional ones of a first step a doctor died in
            # (they leave no in-flight record); a deferral ("plan") or a hold waits for its time
            looked = inc.step == 0 and all(a.name in self.optional for a in actions)
            if actions and looked:
                log.warning("incident %d: its first step did not finish: it runs again", inc.id)
            return looked or not actions
        last = actions[-1].at if actions else 0.0
        return last <= self.last_start <= f.at


__all__ = ["TRANSITIONS", "IncidentManager", "IncidentStateError"]
