"""What the CLI prints of the store, as data: the JSON shapes that ``incidents --json``, the
bundle and the demo share."""

from __future__ import annotations

from typing import Any

from ascend_doctor.core.events import Severity
from ascend_doctor.core.store import Store


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


__all__ = ["incident_dicts"]
