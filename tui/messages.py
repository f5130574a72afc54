"""Messages between the TUI's widgets and screens (dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from ascend_doctor.core.store import SpanRecord


@dataclass
class OpenIncident(Message):
    """Open the incident screen of this incident."""

    incident_id: int


@dataclass
class OpenTrace(Message):
    """Open the waterfall of this trace."""

    trace_id: str
    title: str


@dataclass
class SpanChosen(Message):
    """The waterfall's cursor moved to this span (None: no span)."""

    span: SpanRecord | None


@dataclass
class RequestQueued(Message):
    """A request was added to the store for the daemon to carry out."""

    request_id: int
    kind: str
    incident_id: int | None


__all__ = ["OpenIncident", "OpenTrace", "RequestQueued", "SpanChosen"]
