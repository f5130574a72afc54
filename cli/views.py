"""What the CLI prints of the store, as data: the JSON shapes that ``incidents --json``, the
bundle and the demo share."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ascend_doctor.core.events import ProcessEvent, Severity
from ascend_doctor.core.words import plural

if TYPE_CHECKING:  # `rules scan` prints a plural: it need not load the store
    from ascend_doctor.core.store import Store, StoredFinding


def incident_dicts(store: Store) -> list[dict[str, Any]]:
    """Incidents as the JSON shape the CLI prints."""
    out = []
    for inc in store.incidents():
        out.append(
            {
                "id": inc.id,
                "category": inc.category.value,
                "subject": inc.subject,
                "state": inc.state.value,
                "severity": Severity(inc.severity).label,
                "acknowledged": inc.acknowledged,
                "opened_at": inc.opened_at,
                "resolved_at": inc.resolved_at,
                "summary": inc.summary,
                "rule": inc.rule,
                "findings": store.finding_count(inc.id),
                "actions": [
                    {
                        "name": a.name,
                        "params": a.params,
                        "outcome": a.outcome.value,
                        "reason": a.reason,
                        "at": a.at,
                    }
                    for a in store.actions(inc.id)
                ],
            }
        )
    return out


def when(at: float | None, utc: bool = False) -> str:
    """A wall time as an operator reads it: local time with its zone (``--utc``: UTC)."""
    if at is None:
        return "-"
    t = time.gmtime(at) if utc else time.localtime(at)
    return time.strftime("%Y-%m-%d %H:%M:%S %Z" if not utc else "%Y-%m-%d %H:%M:%S UTC", t)


def finding_dict(stored: StoredFinding) -> dict[str, Any]:
    """A stored finding as JSON (``findings.json`` of a bundle reads back into the store)."""
    f = stored.finding
    return {
        "id": stored.id,
        "incident_id": stored.incident_id,
        "rule": f.rule,
        "category": f.category.value,
        "severity": f.severity.label,
        "role": f.role.value,
        "subject": f.subject,
        "summary": f.summary,
        "captures": f.captures,
        "evidence": [
            {"path": e.path, "offset": e.offset, "line": e.line, "text": e.text} for e in f.evidence
        ],
        "path": f.path,
        "file_id": f.file_id,
        "offset": f.offset,
        "at": f.at,
    }


def process_event_dict(event: ProcessEvent) -> dict[str, Any]:
    """A supervisor state change as JSON."""
    return {
        "state": event.state.value,
        "previous": event.previous.value,
        "pid": event.pid,
        "exit_code": event.exit_code,
        "crashed": event.crashed,
        "reason": event.reason,
        "at": event.at,
    }


__all__ = ["finding_dict", "incident_dicts", "plural", "process_event_dict", "when"]
