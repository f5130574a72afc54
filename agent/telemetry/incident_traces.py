"""One trace per incident, built from what the store records.

The root span ``incident <category>`` starts when the incident opens and ends when it is
resolved or escalated; ``detect`` (a finding), ``remediate.<action>`` (a decision, taken or
refused) and ``verify`` (the health that resolved it) are its children. Trace and root span
ids are derived from the incident id and a per-store random salt, so a doctor restarted in
the middle of an incident continues the same trace (the root span it ends replaces any
earlier copy: the store keeps the last version of a span).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)

from ascend_doctor.core.events import (
    ActionResult,
    Finding,
    Incident,
    IncidentState,
    Outcome,
    Severity,
)
from ascend_doctor.core.store import Store
from ascend_doctor.metrics.devices import device_attributes, join_labels

log = logging.getLogger(__name__)

SALT_KEY = "telemetry.trace_salt"
TERMINAL = (IncidentState.RESOLVED, IncidentState.ESCALATED)


def ns(t: float) -> int:
    """Wall-clock seconds as OTLP nanoseconds."""
    return int(t * 1e9)


class FixedIds(RandomIdGenerator):
    """Random ids, except the next trace and span id when they are set (incident roots)."""

    def __init__(self) -> None:
        self.next_trace: int | None = None
        self.next_span: int | None = None

    def generate_trace_id(self) -> int:
        """The pinned trace id once, else a random one."""
        value, self.next_trace = self.next_trace, None
        return value if value is not None else super().generate_trace_id()

    def generate_span_id(self) -> int:
        """The pinned span id once, else a random one."""
        value, self.next_span = self.next_span, None
        return value if value is not None else super().generate_span_id()


class ExceptionNotes(logging.Handler):
    """Keeps the newest exception the doctor logged, so a failed action's span can carry
    the real exception (``record_exception``) rather than only its text."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.last: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Remember the record's exception, if any."""
        if record.exc_info and record.exc_info[1] is not None:
            self.last = record.exc_info[1]

    def take(self, reason: str) -> BaseException | None:
        """The remembered exception when ``reason`` is its ``Type: message`` text."""
        exc = self.last
        if exc is not None and reason == f"{type(exc).__name__}: {exc}":
            self.last = None
            return exc
        return None


def _scalar(value: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


class IncidentTracer:
    """Turns incident, finding and action records into one trace per incident."""

    def __init__(
        self, tracer: Tracer, ids: FixedIds, store: Store, *, settle_seconds: float = 0.0
    ) -> None:
        self.tracer = tracer
        self.ids = ids
        self.store = store
        self.settle_seconds = settle_seconds
        self.exceptions = ExceptionNotes()
        salt = store.meta(SALT_KEY)
        if not isinstance(salt, str):
            salt = secrets.token_hex(16)
            store.set_meta(SALT_KEY, salt)
        self._salt = salt
        self._roots: dict[int, Span] = {}
        self._last: dict[int, float] = {}
        """Wall time of each incident's newest recorded step (where the next span starts)."""

    def trace_ids(self, incident_id: int) -> tuple[int, int]:
        """(trace id, root span id) of an incident: the same in every doctor on this store."""
        digest = hashlib.sha256(f"{self._salt}/incident/{incident_id}".encode()).digest()
        trace_id = int.from_bytes(digest[:16], "big") or 1
        span_id = int.from_bytes(digest[16:24], "big") or 1
        return trace_id, span_id

    def _parent(self, incident_id: int) -> Context:
        root = self._roots.get(incident_id)
        if root is None:
            trace_id, span_id = self.trace_ids(incident_id)
            ctx = SpanContext(trace_id, span_id, False, TraceFlags(TraceFlags.SAMPLED))
            return trace.set_span_in_context(NonRecordingSpan(ctx))
        return trace.set_span_in_context(root)

    def _root(self, inc: Incident, *, force: bool = False) -> Span | None:
        if inc.id in self._roots:
            return self._roots[inc.id]
        if inc.state in TERMINAL and not force:
            return None  # ended already (in this doctor or an earlier one)
        self.ids.next_trace, self.ids.next_span = self.trace_ids(inc.id)
        attrs: dict[str, Any] = {
            "incident.id": inc.id,
            "incident.category": inc.category.value,
            "incident.subject": inc.subject,
            "incident.severity": Severity(inc.severity).label,
            "incident.rule": inc.rule,
            "incident.summary": inc.summary,
            "incident.state": inc.state.value,
        }
        sample = self.store.latest_samples("npu_smi").get(inc.subject)
        if sample is not None:
            attrs.update(device_attributes(inc.subject, sample))
            # NPU Exporter's chip identity as on the device's series: the trace joins them
            joins = join_labels(inc.subject, sample)
            attrs.update({k: v for k, v in joins.items() if k in ("vdie_id", "model_name")})
        span = self.tracer.start_span(
            f"incident {inc.category.value}",
            context=Context(),
            attributes=attrs,
            start_time=ns(inc.opened_at),
        )
        self.ids.next_trace = self.ids.next_span = None
        self._roots[inc.id] = span
        self._last.setdefault(inc.id, inc.opened_at)
        return span

    # -- what the store tells ------------------------------------------------------------------

    def incident_changed(self, before: Incident | None, after: Incident) -> None:
        """Open the root span; on resolution or escalation add ``verify`` and end it."""
        if after.id not in self._roots and (before is None or before.state not in TERMINAL):
            self._root(after, force=True)
        if after.state not in TERMINAL or (before is not None and before.state in TERMINAL):
            root = self._roots.get(after.id)
            if root is not None:
                self._refresh(root, after)
            return
        end = after.resolved_at or time.time()
        verified = any(a.name == "verify" for a in self.store.actions(after.id))
        if after.state == IncidentState.RESOLVED and not verified:
            self._verify(after, end)
        self._end(after, end)

    def finding_added(self, finding: Finding, incident_id: int | None) -> None:
        """A ``detect`` span: the finding, its evidence lines as events, captures as
        attributes; it runs from the logged event to when the doctor recorded it."""
        if incident_id is None:
            return
        self._ensure_root(incident_id)
        now = time.time()
        start = min(finding.at, now)
        attrs: dict[str, Any] = {
            "incident.id": incident_id,
            "finding.rule": finding.rule,
            "finding.category": finding.category.value,
            "finding.severity": Severity(finding.severity).label,
            "finding.role": finding.role.value,
            "finding.subject": finding.subject,
            "finding.summary": finding.summary,
        }
        if finding.path:
            attrs["log.file.path"] = finding.path
            attrs["log.offset"] = finding.offset
        for key, value in finding.captures.items():
            attrs[f"finding.capture.{key}"] = str(value)
        span = self.tracer.start_span(
            "detect", context=self._parent(incident_id), attributes=attrs, start_time=ns(start)
        )
        for line in finding.evidence:
            span.add_event(
                "evidence",
                {
                    "log.file.path": line.path,
                    "log.line": line.line,
                    "log.offset": line.offset,
                    "log.record": line.text,
                },
                timestamp=ns(start),
            )
        span.end(end_time=ns(now))
        self._last[incident_id] = max(self._last.get(incident_id, now), now)

    def action_added(self, incident_id: int, result: ActionResult) -> None:
        """A ``remediate.<action>`` span: params, decision and reason, outcome; the daemon's
        ``verify`` decision (health, settle window, 1-token completion) is the ``verify`` span."""
        self._ensure_root(incident_id)
        if result.name == "verify":
            try:
                inc = self.store.incident(incident_id)
            except KeyError:
                return
            self._verify(inc, result.at, result)
            self._last[incident_id] = result.at
            return
        start = min(self._last.get(incident_id, result.at), result.at)
        attrs: dict[str, Any] = {
            "incident.id": incident_id,
            "remediation.action": result.name,
            "remediation.decision": result.outcome.value,
            "remediation.reason": result.reason,
            "remediation.params": json.dumps(result.params, sort_keys=True, default=str),
        }
        for key, value in result.params.items():
            attrs[f"remediation.param.{key}"] = _scalar(value)
        span = self.tracer.start_span(
            f"remediate.{result.name}",
            context=self._parent(incident_id),
            attributes=attrs,
            start_time=ns(start),
        )
        if result.outcome in (Outcome.FAILED, Outcome.UNKNOWN):
            exc = self.exceptions.take(result.reason)
            if exc is not None:
                span.record_exception(exc)
            # error.type: low-cardinality, as the conventions ask of every failed operation
            span.set_attribute("error.type", type(exc).__name__ if exc else result.outcome.value)
            span.set_status(Status(StatusCode.ERROR, result.reason))
        elif result.outcome == Outcome.OK:
            span.set_status(Status(StatusCode.OK))
        span.end(end_time=ns(result.at))
        self._last[incident_id] = result.at

    # -- helpers -------------------------------------------------------------------------------

    def _ensure_root(self, incident_id: int) -> None:
        if incident_id not in self._roots:
            try:
                self._root(self.store.incident(incident_id))
            except KeyError:
                pass

    def _verify(self, inc: Incident, end: float, result: ActionResult | None = None) -> None:
        start = min(self._last.get(inc.id, end), end)
        ok = result is None or result.outcome == Outcome.OK
        attrs: dict[str, Any] = {
            "incident.id": inc.id,
            "verify.result": "healthy" if ok else "failed",
            "verify.settle_seconds": self.settle_seconds,
        }
        if result is not None:
            attrs["verify.reason"] = result.reason
        server = self.store.server()
        if server is not None:
            attrs["verify.server.state"] = server.state.value
            if server.since:
                attrs["verify.server.healthy_since"] = server.since
        probe = self.store.latest_samples("vllm").get("server", {})
        for key in ("health_status", "health_latency_ms"):
            if key in probe:
                attrs[f"verify.probe.{key}"] = probe[key]
        actions = self.store.actions(inc.id)
        for a in actions:
            if "health_after" in a.params:
                attrs["verify.device.health_after"] = str(a.params["health_after"])
        span = self.tracer.start_span(
            "verify", context=self._parent(inc.id), attributes=attrs, start_time=ns(start)
        )
        if ok:
            span.set_status(Status(StatusCode.OK))
        else:
            span.set_attribute("error.type", "unhealthy")
            span.set_status(Status(StatusCode.ERROR, result.reason if result else "failed"))
        span.end(end_time=ns(end))

    @staticmethod
    def _refresh(root: Span, inc: Incident) -> None:
        """The incident as it is now: a root cause found after its symptom renames the trace."""
        root.update_name(f"incident {inc.category.value}")
        root.set_attribute("incident.category", inc.category.value)
        root.set_attribute("incident.rule", inc.rule)
        root.set_attribute("incident.summary", inc.summary)
        root.set_attribute("incident.state", inc.state.value)
        root.set_attribute("incident.severity", Severity(inc.severity).label)
        root.set_attribute("incident.subject", inc.subject)

    def _end(self, inc: Incident, end: float, *, interrupted: bool = False) -> None:
        root = self._roots.pop(inc.id, None) if not interrupted else self._roots.get(inc.id)
        if root is None:
            return
        self._refresh(root, inc)
        root.set_attribute("incident.attempts", inc.attempts)
        root.set_attribute("incident.acknowledged", inc.acknowledged)
        if interrupted:
            root.set_attribute("ascend_doctor.interrupted", True)
        elif inc.state == IncidentState.ESCALATED:
            actions = self.store.actions(inc.id)
            why = actions[-1].reason if actions else "escalated"
            root.set_attribute("error.type", "escalated")
            root.set_status(Status(StatusCode.ERROR, f"escalated: {why}"))
        else:
            root.set_status(Status(StatusCode.OK))
        root.end(end_time=ns(max(end, inc.opened_at)))
        if interrupted:
            self._roots.pop(inc.id, None)
        self._last.pop(inc.id, None)

    @contextlib.contextmanager
    def context(self, incident_id: int) -> Iterator[None]:
        """Run a block inside the incident's root span: the doctor's log lines carry its
        trace and span ids, and an exception escaping the block is recorded on it."""
        self._ensure_root(incident_id)
        root = self._roots.get(incident_id)
        if root is None:
            yield
            return
        with trace.use_span(root, end_on_exit=False, record_exception=True):
            yield

    def close(self) -> None:
        """The doctor is stopping: end the open roots as they stand (a restarted doctor
        ends them again, with the same ids, when the incidents finish)."""
        for incident_id in list(self._roots):
            try:
                inc = self.store.incident(incident_id)
            except KeyError:
                self._roots.pop(incident_id, None)
                continue
            self._end(inc, time.time(), interrupted=True)


__all__ = ["ExceptionNotes", "FixedIds", "IncidentTracer", "ns"]
