"""The store's incidents, their findings and their remediation decisions. Part of
:class:`ascend_doctor.core.store.Store`. Only the incident manager (``agent/incidents.py``)
changes an incident; everyone reads."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import (
    ActionResult,
    Category,
    Finding,
    Incident,
    IncidentState,
    LogLine,
    Outcome,
    PlannedAction,
    Role,
    Severity,
)
from ascend_doctor.core.redact import redact_params, redact_text
from ascend_doctor.core.store_base import StoreBase

Plan = tuple[tuple[PlannedAction, ...], ...]


class IncidentNotFound(StoreError, KeyError):
    """No incident has that id."""

    def __str__(self) -> str:
        return f"no incident #{self.args[0]}"


@dataclass(frozen=True, slots=True)
class StoredFinding:
    """A finding as the store keeps it: the event, and where it went."""

    id: int
    """Store id."""
    incident_id: int | None
    """The incident it joined (None: kept without one)."""
    finding: Finding
    """The finding itself (its ``remediation`` is on the incident as the plan)."""


class IncidentsMixin(StoreBase):
    """Incidents, findings, actions."""

    # -- incidents ---------------------------------------------------------------------------

    def open_incident(self, finding: Finding) -> Incident:
        """Create an incident whose root is ``finding``."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO incidents (category, subject, state, severity, rule, summary,"
                " opened_at, updated_at, plan) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    finding.category.value,
                    finding.subject,
                    IncidentState.OPEN.value,
                    int(finding.severity),
                    finding.rule,
                    finding.summary,
                    finding.at,
                    finding.at,
                    plan_json(finding.remediation),
                ),
            )
            incident_id = cur.lastrowid
        assert incident_id is not None
        incident = self.incident(incident_id)
        self._notify(lambda li: li.incident_changed(None, incident))
        return incident

    def incident(self, incident_id: int) -> Incident:
        """One incident; KeyError when there is none with that id."""
        row = self._db.execute("SELECT * FROM incidents WHERE id = ?", (incident_id,)).fetchone()
        if row is None:
            raise IncidentNotFound(incident_id)
        return _incident(row)

    def incidents(
        self, *, states: Sequence[IncidentState] = (), newest: int | None = None
    ) -> list[Incident]:
        """Incidents, oldest first, optionally only in some states and only the ``newest``."""
        where, args = "", []
        if states:
            where = f"WHERE state IN ({','.join('?' * len(states))})"
            args = [s.value for s in states]
        if newest is not None:
            rows = self._db.execute(
                f"SELECT * FROM (SELECT * FROM incidents {where} ORDER BY id DESC LIMIT ?)"
                " ORDER BY id",
                [*args, newest],
            )
        else:
            rows = self._db.execute(f"SELECT * FROM incidents {where} ORDER BY id", args)
        return [_incident(r) for r in rows]

    def update_incident(self, incident_id: int, **fields: Any) -> Incident:
        """Change some fields of an incident (state, step, attempts, severity, resolved_at...)."""
        allowed = {
            "state",
            "step",
            "attempts",
            "severity",
            "resolved_at",
            "acknowledged",
            "summary",
            "subject",
            "category",
            "rule",
            "plan",
        }
        unknown = set(fields) - allowed
        if unknown:
            raise StoreError(f"cannot update incident fields {sorted(unknown)}")
        values = {
            k: (v.value if isinstance(v, IncidentState | Category) else v)
            for k, v in fields.items()
        }
        values = {k: (int(v) if isinstance(v, Severity | bool) else v) for k, v in values.items()}
        if "plan" in values:
            values["plan"] = plan_json(fields["plan"])
        sets = ", ".join(f"{k} = ?" for k in values)
        before = self.incident(incident_id) if self.listeners else None
        with self._tx() as db:
            db.execute(
                f"UPDATE incidents SET {sets}, updated_at = ? WHERE id = ?",
                [*values.values(), time.time(), incident_id],
            )
        after = self.incident(incident_id)
        if before is not None:
            self._notify(lambda li: li.incident_changed(before, after))
        return after

    # -- findings ----------------------------------------------------------------------------

    def add_finding(self, finding: Finding, incident_id: int | None) -> bool:
        """Store a finding; False when the same (file, offset, rule) was stored before."""
        evidence = [
            {"path": e.path, "offset": e.offset, "line": e.line, "text": e.text}
            for e in finding.evidence
        ]
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO findings (incident_id, rule, category, severity, role, subject,"
                    " summary, captures, evidence, path, file_id, offset, at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        incident_id,
                        finding.rule,
                        finding.category.value,
                        int(finding.severity),
                        finding.role.value,
                        finding.subject,
                        finding.summary,
                        json.dumps(finding.captures),
                        json.dumps(evidence),
                        finding.path,
                        finding.file_id or finding.path,
                        finding.offset,
                        finding.at,
                    ),
                )
        except sqlite3.IntegrityError:
            return False
        self._notify(lambda li: li.finding_added(finding, incident_id))
        return True

    def seen_finding(self, file_id: str, offset: int, rule: str) -> bool:
        """Whether a finding of ``rule`` at (file, offset) is already stored."""
        row = self._db.execute(
            "SELECT 1 FROM findings WHERE file_id = ? AND offset = ? AND rule = ?",
            (file_id, offset, rule),
        ).fetchone()
        return row is not None

    def finding_count(self, incident_id: int) -> int:
        """How many findings an incident has (an unknown error repeated 100 times: 100)."""
        row = self._db.execute(
            "SELECT COUNT(*) FROM findings WHERE incident_id = ?", (incident_id,)
        ).fetchone()
        return int(row[0])

    def findings(self, incident_id: int | None = None) -> list[StoredFinding]:
        """Stored findings, oldest first (of one incident, or all)."""
        if incident_id is None:
            rows = self._db.execute("SELECT * FROM findings ORDER BY id")
        else:
            rows = self._db.execute(
                "SELECT * FROM findings WHERE incident_id = ? ORDER BY id", (incident_id,)
            )
        return [_stored_finding(r) for r in rows]

    # -- actions -----------------------------------------------------------------------------

    def add_action(self, incident_id: int, result: ActionResult) -> None:
        """Record one remediation decision (secrets in its params and reason redacted, for
        every reader and listener: spans, alerts, bundles)."""
        result = replace(
            result, params=redact_params(result.params), reason=redact_text(result.reason)
        )
        with self._tx() as db:
            db.execute(
                "INSERT INTO actions (incident_id, name, params, outcome, reason, at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    incident_id,
                    result.name,
                    json.dumps(result.params, sort_keys=True),
                    result.outcome.value,
                    result.reason,
                    result.at,
                ),
            )
        self._notify(lambda li: li.action_added(incident_id, result))

    def actions(self, incident_id: int) -> list[ActionResult]:
        """The decisions of an incident, in order."""
        rows = self._db.execute(
            "SELECT * FROM actions WHERE incident_id = ? ORDER BY id", (incident_id,)
        )
        return [
            ActionResult(
                name=r["name"],
                params=json.loads(r["params"]),
                outcome=Outcome(r["outcome"]),
                reason=r["reason"],
                at=r["at"],
            )
            for r in rows
        ]

    def action_times(self, category: str, name: str) -> list[float]:
        """When action ``name`` acted (``ok``) on incidents of ``category``, oldest first."""
        rows = self._db.execute(
            "SELECT a.at FROM actions a JOIN incidents i ON i.id = a.incident_id"
            " WHERE i.category = ? AND a.name = ? AND a.outcome = ? ORDER BY a.at",
            (category, name, Outcome.OK.value),
        )
        return [float(r["at"]) for r in rows]


def plan_json(plan: Plan) -> str:
    """A plan as stored: ``[[{"name": ..., "params": {...}}, ...], ...]``."""
    return json.dumps([[{"name": a.name, "params": a.params} for a in step] for step in plan])


def _plan(text: str) -> Plan:
    return tuple(
        tuple(PlannedAction(str(a["name"]), dict(a.get("params") or {})) for a in step)
        for step in json.loads(text or "[]")
    )


def _stored_finding(row: sqlite3.Row) -> StoredFinding:
    evidence = tuple(
        LogLine(str(e["path"]), int(e["offset"]), str(e["text"]), int(e.get("line") or 0))
        for e in json.loads(row["evidence"])
    )
    return StoredFinding(
        id=row["id"],
        incident_id=row["incident_id"],
        finding=Finding(
            rule=row["rule"],
            category=Category(row["category"]),
            severity=Severity(row["severity"]),
            role=Role(row["role"]),
            subject=row["subject"],
            summary=row["summary"],
            at=row["at"],
            captures=json.loads(row["captures"]),
            evidence=evidence,
            path=row["path"],
            offset=row["offset"],
            file_id=row["file_id"],
        ),
    )


def _incident(row: sqlite3.Row) -> Incident:
    return Incident(
        id=row["id"],
        category=Category(row["category"]),
        subject=row["subject"],
        state=IncidentState(row["state"]),
        severity=Severity(row["severity"]),
        rule=row["rule"],
        summary=row["summary"],
        opened_at=row["opened_at"],
        resolved_at=row["resolved_at"],
        step=row["step"],
        attempts=row["attempts"],
        acknowledged=bool(row["acknowledged"]),
        plan=_plan(row["plan"]),
    )


__all__ = ["IncidentNotFound", "IncidentsMixin", "Plan", "StoredFinding", "plan_json"]
