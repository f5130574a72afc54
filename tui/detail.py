"""One incident in detail (findings, decisions, requests, the trace) and the trace lists,
read from the store in one go into frozen views (in a worker thread, never on the event loop)."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_doctor.core.events import (
    ActionResult,
    Role,
)
from ascend_doctor.core.store import SpanRecord
from ascend_doctor.tui.data import IncidentRow, Source, incident_row


@dataclass(frozen=True, slots=True)
class EvidenceView:
    """One evidence line of a finding."""

    path: str
    line: int
    """1-based line number; 0 when unknown (then ``offset`` says where)."""
    offset: int
    text: str

    @property
    def where(self) -> str:
        """``path:line``, or ``path@offset`` when the line number is unknown."""
        return f"{self.path}:{self.line}" if self.line else f"{self.path}@{self.offset}"


@dataclass(frozen=True, slots=True)
class FindingView:
    """A finding of an incident: its rule, role and evidence."""

    rule: str
    role: str
    severity: str
    summary: str
    evidence: tuple[EvidenceView, ...]


@dataclass(frozen=True, slots=True)
class RequestView:
    """A request an operator made about this incident, and what became of it."""

    id: int
    kind: str
    state: str
    result: str


@dataclass(frozen=True, slots=True)
class IncidentDetail:
    """Everything the incident screen shows."""

    incident: IncidentRow
    rule: str
    explanation: str
    roots: tuple[FindingView, ...]
    symptoms: tuple[FindingView, ...]
    actions: tuple[ActionResult, ...]
    requests: tuple[RequestView, ...]
    spans: tuple[SpanRecord, ...]


def explain(
    rule: str, roots: list[FindingView], symptoms: list[FindingView], actions: list[ActionResult]
) -> str:
    """A few sentences: what was recognised, from what, and what the doctor decided."""
    parts = []
    if roots:
        parts.append(f"Root cause: {roots[0].summary} (rule {roots[0].rule}).")
    else:
        parts.append(f"Recognised by rule {rule}.")
    if symptoms:
        parts.append(f"{len(symptoms)} symptom finding(s) followed from it.")
    taken = [a for a in actions if a.name != "escalate"]
    if taken:
        last = taken[-1]
        parts.append(f"Last decision: {last.name} {last.outcome.value}: {last.reason}.")
    esc = [a for a in actions if a.name == "escalate"]
    if esc:
        parts.append(f"Escalated to a human: {esc[-1].reason}.")
    return " ".join(parts)


def load_incident(source: Source, incident_id: int) -> IncidentDetail:
    """One incident with its findings, decisions, requests and trace (KeyError: unknown id)."""
    with source.reader() as store:
        inc = store.incident(incident_id)
        roots: list[FindingView] = []
        symptoms: list[FindingView] = []
        for stored in store.findings(incident_id):
            f = stored.finding
            view = FindingView(
                rule=f.rule,
                role=f.role.value,
                severity=f.severity.label,
                summary=f.summary,
                evidence=tuple(
                    EvidenceView(
                        source.display(e.path),
                        e.line or source.line_number(e.path, e.offset, e.text),
                        e.offset,
                        e.text,
                    )
                    for e in f.evidence
                ),
            )
            (roots if f.role == Role.ROOT else symptoms).append(view)
        actions = store.actions(incident_id)
        requests = tuple(
            RequestView(r.id, r.kind, r.state, r.result)
            for r in store.requests(limit=500)
            if r.incident_id == incident_id
        )
        trace = store.incident_trace_id(incident_id)
        spans = tuple(store.spans(trace)) if trace else ()
    return IncidentDetail(
        incident=incident_row(inc),
        rule=inc.rule,
        explanation=explain(inc.rule, roots, symptoms, actions),
        roots=tuple(roots),
        symptoms=tuple(symptoms),
        actions=tuple(actions),
        requests=requests,
        spans=spans,
    )


# -- traces ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One trace in the list: its root span."""

    trace_id: str
    name: str
    source: str
    incident_id: int | None
    start_ns: int
    duration_ms: float
    status: str


def load_traces(source: Source, limit: int = 200) -> tuple[TraceRow, ...]:
    """The newest traces, newest first: the doctor's own (incidents) and the server's requests
    read apart, so a busy server's many request traces never push the incidents out."""
    with source.reader() as store:
        roots = store.traces(source="doctor", limit=limit) + store.traces(
            source="server", limit=limit
        )
    roots.sort(key=lambda r: (r.start_ns, r.trace_id), reverse=True)
    return tuple(
        TraceRow(
            r.trace_id,
            r.name,
            r.source,
            r.incident_id,
            r.start_ns,
            (r.end_ns - r.start_ns) / 1e6,
            r.status,
        )
        for r in roots
    )


def load_trace(source: Source, trace_id: str) -> tuple[SpanRecord, ...]:
    """Every span of one trace."""
    with source.reader() as store:
        return tuple(store.spans(trace_id))


__all__ = [
    "EvidenceView",
    "FindingView",
    "IncidentDetail",
    "RequestView",
    "TraceRow",
    "explain",
    "load_incident",
    "load_trace",
    "load_traces",
]
