"""The alert document every sink renders, and what a delivery attempt came to.

The document is also the generic webhook's body and the command sink's stdin:
a versioned JSON schema (``schema = "ascend-doctor.alert/v1"``), documented field by field
in :class:`Alert`. New fields may be added within v1; renaming or removing one makes v2.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

SCHEMA = "ascend-doctor.alert/v1"
SUMMARY_MAX = 1024  # PagerDuty's limit, used by every sink
EVENTS = ("opened", "escalated", "resolved", "remediation_failed")
"""Incident transitions that can alert (routes choose among them)."""


class Kind(StrEnum):
    """What the alert does at the sink (PagerDuty's event actions)."""

    TRIGGER = "trigger"
    ACKNOWLEDGE = "acknowledge"
    RESOLVE = "resolve"


@dataclass(frozen=True)
class Alert:
    """One alert: an incident's transition as on-call sees it (schema v1)."""

    kind: str
    """``trigger``, ``acknowledge`` or ``resolve``."""
    event: str
    """``opened``, ``escalated``, ``resolved``, ``remediation_failed``, ``acknowledged``,
    ``test``; a repeat of a firing alert keeps its event and sets ``repeat``."""
    dedup_key: str
    """One key per incident, shared by its trigger, acknowledge and resolve."""
    host: str
    """The host the doctor runs on."""
    summary: str
    """One line, at most 1,024 characters."""
    severity: str
    """``critical``, ``error``, ``warning`` or ``info``."""
    category: str
    """The failure category (docs/categories.md)."""
    subject: str
    """What failed: ``server`` or ``npu<N>``."""
    device: str
    """The device (``npu3``), empty when the incident is the server's."""
    incident_id: int | None
    """The doctor's incident id (None for a test alert)."""
    state: str
    """The incident's state: ``open``, ``mitigating``, ``resolved``, ``escalated``."""
    rule: str
    """Id of the rule that found the root cause."""
    root_cause: str
    """The root finding's summary."""
    explain: str
    """What it means and what to check (from the rule)."""
    evidence: tuple[str, ...] = ()
    """Log lines of the root finding, ``path:line: text``; trimmed first when too large."""
    actions: tuple[dict[str, Any], ...] = ()
    """Remediation decisions: ``{"name", "outcome", "reason", "at"}``."""
    trace_id: str = ""
    """The incident's OpenTelemetry trace id (empty until its first span is stored)."""
    acknowledged: bool = False
    """An operator acknowledged the incident."""
    opened_at: float = 0.0
    """When the incident opened (epoch seconds)."""
    resolved_at: float | None = None
    """When it was resolved or escalated."""
    at: float = 0.0
    """When this alert was made."""
    repeat: bool = False
    """A repeat of an alert already delivered (repeat interval)."""
    schema: str = SCHEMA
    """The schema version of this document."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Reserved for additions within v1."""

    def to_json(self) -> dict[str, Any]:
        """The document as plain JSON types."""
        data = dataclasses.asdict(self)
        data["evidence"] = list(self.evidence)
        data["actions"] = [dict(a) for a in self.actions]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Alert:
        """Read a stored document back (unknown keys are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["evidence"] = tuple(values.get("evidence", ()))
        values["actions"] = tuple(values.get("actions", ()))
        return cls(**values)

    def body(self) -> bytes:
        """The document as compact JSON bytes (what the webhook signs)."""
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class Delivery:
    """What one attempt to deliver came to."""

    ok: bool
    """The sink accepted it."""
    retry: bool = False
    """A failure worth retrying (network error, timeout, 429, 5xx, non-zero exit)."""
    error: str = ""
    """Why it failed, with no secret in it."""
    response: str = ""
    """The sink's answer (status and the start of the body), for the record."""
    retry_after: float = 0.0
    """Seconds the sink asked us to wait (429 Retry-After)."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["EVENTS", "SCHEMA", "SUMMARY_MAX", "Alert", "Delivery", "Kind", "clip"]
