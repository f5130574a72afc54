"""The alert engine: a store listener that turns incident transitions into alerts in the
outbox. It only writes the outbox (fast, synchronous, in the writer's call); the delivery
loop (``delivery.py``) is what talks to sinks.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

from ascend_doctor.core.config import AlertsConfig
from ascend_doctor.core.errors import AlertError, ConfigError
from ascend_doctor.core.events import (
    ACTIVE_STATES,
    ActionResult,
    Incident,
    IncidentState,
    Outcome,
    Severity,
)
from ascend_doctor.core.store import Store, StoreListener
from ascend_doctor.rules import RuleSet
from ascend_doctor.sinks.base import SINKS, Sink
from ascend_doctor.sinks.model import SUMMARY_MAX, Alert, Kind, clip

from .routing import route, silenced_by

log = logging.getLogger(__name__)

EVIDENCE_LINES = 50
LIVE = ("pending", "sent")  # outbox states of an alert that reached, or will reach, its sink


def build_sinks(config: AlertsConfig, environ: Mapping[str, str] | None = None) -> list[Sink]:
    """Every configured sink, checked: a bad URL, an unreadable secret, a duplicate name or a
    route to an unknown sink is a ConfigError naming the key."""
    env = os.environ if environ is None else environ
    sinks: list[Sink] = []
    for i, cfg in enumerate(config.sinks):
        prefix = f"alerts.sinks[{i}]."
        if not cfg.name:
            raise ConfigError(f"config '{prefix}name' is empty: expected a sink name")
        if not cfg.type:
            raise ConfigError(
                f"config '{prefix}type' is empty: expected one of {', '.join(sorted(SINKS))}"
            )
        if any(s.name == cfg.name for s in sinks):
            raise ConfigError(f"config '{prefix}name' is {cfg.name!r}: expected a unique name")
        sink = SINKS[cfg.type](cfg, prefix, env)
        sink.check()
        sinks.append(sink)
    names = {s.name for s in sinks}
    for i, r in enumerate(config.routes):
        for name in r.sinks:
            if name not in names:
                raise ConfigError(
                    f"config 'alerts.routes[{i}].sinks' names {name!r}:"
                    f" expected one of the sinks ({', '.join(sorted(names)) or 'none configured'})"
                )
        for event in r.events:
            if event not in ("opened", "escalated", "resolved", "remediation_failed"):
                raise ConfigError(
                    f"config 'alerts.routes[{i}].events' has {event!r}: expected opened,"
                    " escalated, resolved or remediation_failed"
                )
    return sinks


class AlertListener(StoreListener):
    """Listens to the store; queues each alert in the outbox for the sinks it routes to."""

    def __init__(
        self,
        config: AlertsConfig,
        store: Store,
        *,
        rules: RuleSet | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.store = store
        self.sinks = build_sinks(config, environ)
        self.host = config.host or socket.gethostname()
        self.clock = clock
        self._explain: dict[str, str] = {}
        self.may_page: Callable[[Incident], bool] = lambda incident: True
        """Whether an incident's opening may page (not while it rests on text alone)."""
        if rules is not None:
            self._explain.update({r.id: r.explain for r in rules.text})
            self._explain.update({r.id: r.explain for r in rules.thresholds})

    def sink(self, name: str) -> Sink:
        """A sink by name; AlertError when none."""
        for s in self.sinks:
            if s.name == name:
                return s
        raise AlertError(f"no alert sink named {name!r}")

    # -- store listener ------------------------------------------------------------------------

    def incident_changed(self, before: Incident | None, after: Incident) -> None:
        """Opened, escalated and resolved incidents alert; an acknowledgement follows."""
        if not self.sinks:
            return
        if before is None:
            self.transition(after, "opened")
        elif before.state != after.state and after.state == IncidentState.ESCALATED:
            self.transition(after, "escalated")
        elif before.state != after.state and after.state == IncidentState.RESOLVED:
            self.transition(after, "resolved")
        elif before.severity < Severity.CRITICAL <= after.severity and after.state in ACTIVE_STATES:
            # it became critical while unresolved: page sinks that have not heard of it yet
            self.transition(after, "opened", only_new=True)
        if after.acknowledged and (before is None or not before.acknowledged):
            self.acknowledge(after)

    def action_added(self, incident_id: int, result: ActionResult) -> None:
        """A remediation step that failed (or whose outcome is unknown) alerts."""
        if self.sinks and result.outcome in (Outcome.FAILED, Outcome.UNKNOWN):
            self.transition(self.store.incident(incident_id), "remediation_failed")

    # -- queueing --------------------------------------------------------------------------------

    def dedup_key(self, incident: Incident) -> str:
        """One key per incident, unique across hosts and stores."""
        return f"ascend-doctor:{self.host}:{incident.id}:{int(incident.opened_at)}"

    def alert(self, incident: Incident, event: str, kind: Kind, *, repeat: bool = False) -> Alert:
        """The alert document of an incident now."""
        findings = self.store.findings(incident.id)
        root = next((f.finding for f in findings if f.finding.rule == incident.rule), None)
        root = root or (findings[0].finding if findings else None)
        evidence: list[str] = []
        if root is not None:
            for e in root.evidence[:EVIDENCE_LINES]:
                where = f"{e.path}:{e.line}" if e.line else e.path
                evidence.append(f"{where}: {e.text}")
        actions = tuple(
            {"name": a.name, "outcome": a.outcome.value, "reason": a.reason, "at": a.at}
            for a in self.store.actions(incident.id)
        )
        device = incident.subject if incident.subject.startswith("npu") else ""
        state = incident.state.value
        summary = f"{incident.summary} ({incident.category.value} on {self.host}"
        summary += f" {incident.subject}, {state})"
        return Alert(
            kind=kind.value,
            event=event,
            dedup_key=self.dedup_key(incident),
            host=self.host,
            summary=clip(summary, SUMMARY_MAX),
            severity=Severity(incident.severity).label,
            category=incident.category.value,
            subject=incident.subject,
            device=device,
            incident_id=incident.id,
            state=state,
            rule=incident.rule,
            root_cause=root.summary if root is not None else incident.summary,
            explain=self._explain.get(incident.rule, ""),
            evidence=tuple(evidence),
            actions=actions,
            trace_id=self.store.incident_trace_id(incident.id) or "",
            acknowledged=incident.acknowledged,
            opened_at=incident.opened_at,
            resolved_at=incident.resolved_at,
            at=self.clock(),
            repeat=repeat,
        )

    def transition(self, incident: Incident, event: str, *, only_new: bool = False) -> None:
        """Queue what ``event`` of ``incident`` means for each sink (``only_new``: only for
        sinks that have no trigger of this incident yet)."""
        if event == "resolved":
            self._resolve(incident)
            return
        targets = route(self.sinks, self.config.routes, incident, event)
        if event == "opened" and not self.may_page(incident):
            # text alone beside a healthy server: told, not paged, until something agrees
            targets = [s for s in targets if s.role != "page"]
        if only_new:
            key = self.dedup_key(incident)
            targets = [
                s
                for s in targets
                if not any(
                    r.kind == Kind.TRIGGER
                    for r in self.store.alerts(sink=s.name, dedup_key=key, statuses=LIVE)
                )
            ]
        if not targets:
            return
        now = self.clock()
        alert = self.alert(incident, event, Kind.TRIGGER)
        silence = silenced_by(self.store.silences(active_at=now), incident)
        for sink in targets:
            self._trigger(sink, alert, now, silenced=silence is not None)
        if silence is not None:
            log.info("incident %d %s: silenced by silence %d", incident.id, event, silence.id)

    def _trigger(self, sink: Sink, alert: Alert, now: float, *, silenced: bool) -> None:
        key, doc = alert.dedup_key, alert.to_json()
        if silenced:
            self.store.add_alert(
                sink.name, key, alert.incident_id, alert.kind, alert.event, doc,
                status="silenced", next_at=now, now=now,
            )  # fmt: skip
            return
        pending = self.store.alerts(sink=sink.name, dedup_key=key, statuses=("pending",))
        for row in pending:
            if row.kind == Kind.TRIGGER:
                # not delivered yet (group wait, or the sink is down): send the latest state
                self.store.update_alert(row.id, event=alert.event, alert=doc)
                return
        self.store.add_alert(
            sink.name, key, alert.incident_id, alert.kind, alert.event, doc,
            next_at=now + self.config.group_wait, now=now,
        )  # fmt: skip

    def _follow_up(self, incident: Incident, kind: Kind, event: str) -> None:
        """Queue a resolve or acknowledge to every sink its trigger went to."""
        now = self.clock()
        alert = self.alert(incident, event, kind)
        key, doc = alert.dedup_key, alert.to_json()
        for sink in self.sinks:
            if kind not in sink.handles:
                continue
            rows = self.store.alerts(sink=sink.name, dedup_key=key)
            triggers = [r for r in rows if r.kind == Kind.TRIGGER and r.status in LIVE]
            if not triggers:
                continue  # never triggered there (routed elsewhere, or silenced)
            if any(r.kind == kind and r.id > triggers[-1].id for r in rows):
                continue  # already queued
            held = [r for r in rows if r.status == "pending"]
            in_window = all(
                r.attempts == 0 and now < r.created_at + self.config.group_wait for r in held
            )
            if kind == Kind.RESOLVE and held and len(held) == len(triggers) and in_window:
                # opened and resolved within the group wait: nobody needs to hear of it
                for r in held:
                    self.store.update_alert(r.id, status="superseded", last_error="resolved")
                continue
            self.store.add_alert(
                sink.name, key, incident.id, kind.value, event, doc, next_at=now, now=now
            )

    def _resolve(self, incident: Incident) -> None:
        self._follow_up(incident, Kind.RESOLVE, "resolved")

    def acknowledge(self, incident: Incident) -> None:
        """An operator acknowledged the incident (here or in another process)."""
        if incident.state != IncidentState.RESOLVED:
            self._follow_up(incident, Kind.ACKNOWLEDGE, "acknowledged")


__all__ = ["AlertListener", "build_sinks"]
