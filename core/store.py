"""The store: SQLite in WAL mode, the system of record.

The daemon writes state; the CLI and the TUI read it. One connection per
process; every write is its own short transaction so readers never wait long.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import (
    ActionResult,
    Category,
    Finding,
    Incident,
    IncidentState,
    Outcome,
    Severity,
)
from ascend_doctor.core.store_alerts import AlertRow, AlertsMixin, Silence
from ascend_doctor.core.store_base import StoreListener
from ascend_doctor.core.store_host import SAMPLES_KEPT, HostMixin
from ascend_doctor.core.store_traces import (
    REQUEST_KINDS,
    SERVER_SPANS_KEPT,
    Request,
    SpanRecord,
    TracesMixin,
)

SCHEMA_VERSION = 3
STORE_NAME = "doctor.db"
log = logging.getLogger(__name__)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS incidents (
    id INTEGER PRIMARY KEY,
    category TEXT NOT NULL,
    subject TEXT NOT NULL,
    state TEXT NOT NULL,
    severity INTEGER NOT NULL,
    rule TEXT NOT NULL,
    summary TEXT NOT NULL,
    opened_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    resolved_at REAL,
    step INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    acknowledged INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS incidents_open ON incidents (state, category, subject);
CREATE TABLE IF NOT EXISTS findings (
    id INTEGER PRIMARY KEY,
    incident_id INTEGER REFERENCES incidents (id),
    rule TEXT NOT NULL,
    category TEXT NOT NULL,
    severity INTEGER NOT NULL,
    role TEXT NOT NULL,
    subject TEXT NOT NULL,
    summary TEXT NOT NULL,
    captures TEXT NOT NULL,
    evidence TEXT NOT NULL,
    path TEXT NOT NULL,
    file_id TEXT NOT NULL,
    offset INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS findings_once ON findings (file_id, offset, rule)
    WHERE offset >= 0;
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY,
    incident_id INTEGER NOT NULL REFERENCES incidents (id),
    name TEXT NOT NULL,
    params TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS overrides (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    value TEXT NOT NULL,
    incident_id INTEGER,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS offsets (
    identity TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    offset INTEGER NOT NULL,
    head TEXT NOT NULL,
    file_id TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS offsets_by_head ON offsets (head);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY,
    collector TEXT NOT NULL,
    subject TEXT NOT NULL,
    at REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_by_subject ON samples (collector, subject, id);
CREATE TABLE IF NOT EXISTS process_events (
    id INTEGER PRIMARY KEY,
    state TEXT NOT NULL,
    previous TEXT NOT NULL,
    pid INTEGER,
    exit_code INTEGER,
    crashed INTEGER NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- spans: every finished span, the doctor's own (one trace per incident, supervisor
-- lifecycle) and the server's request spans received over OTLP (source = 'server')
CREATE TABLE IF NOT EXISTS spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    parent_id TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    status TEXT NOT NULL,
    attributes TEXT NOT NULL,
    events TEXT NOT NULL,
    resource TEXT NOT NULL,
    source TEXT NOT NULL,
    incident_id INTEGER,
    PRIMARY KEY (trace_id, span_id)
);
CREATE INDEX IF NOT EXISTS spans_by_incident ON spans (incident_id);
CREATE INDEX IF NOT EXISTS spans_by_start ON spans (source, start_ns);
-- requests: what the CLI and the TUI ask of the daemon (acknowledge, capture a profile,
-- run the next remediation step); the daemon carries them out and records the result
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    incident_id INTEGER,
    params TEXT NOT NULL,
    state TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at REAL NOT NULL,
    done_at REAL
);
CREATE INDEX IF NOT EXISTS requests_pending ON requests (state, id);
-- alerts (issue 9): the durable outbox every alert passes through before any sink sees it
-- (secrets are never in it: rows name the sink, the sink's config names where its secrets
-- are), and the operator's silences
CREATE TABLE IF NOT EXISTS alert_outbox (
    id INTEGER PRIMARY KEY,
    sink TEXT NOT NULL,
    dedup_key TEXT NOT NULL,
    incident_id INTEGER,
    kind TEXT NOT NULL,
    event TEXT NOT NULL,
    alert TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    next_at REAL NOT NULL,
    sent_at REAL,
    last_error TEXT NOT NULL DEFAULT '',
    response TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS alert_outbox_by_status ON alert_outbox (status, sink, id);
CREATE INDEX IF NOT EXISTS alert_outbox_by_key ON alert_outbox (sink, dedup_key, id);
CREATE TABLE IF NOT EXISTS alert_silences (
    id INTEGER PRIMARY KEY,
    category TEXT NOT NULL,
    subject TEXT NOT NULL,
    comment TEXT NOT NULL,
    created_at REAL NOT NULL,
    until REAL NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class Override:
    """A launch change learned by remediation, applied on every later start."""

    key: str
    """A flag (``--max-model-len``) or an environment variable name."""
    kind: str
    """``arg`` (flag with a value), ``flag`` (bare flag) or ``env``."""
    value: str
    """The value; empty for a bare flag."""
    incident_id: int | None
    """The incident that caused it."""
    at: float
    """When it was learned."""


class Store(HostMixin, TracesMixin, AlertsMixin):
    """Typed access to the SQLite store."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        try:
            if readonly:
                if not path.exists():
                    raise StoreError(
                        f"{path}: no store here (has the doctor run with this state dir?)"
                    )
                self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(path, timeout=5.0, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._migrate()
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open store: {exc}") from None
        self._db.row_factory = sqlite3.Row
        self._check_version()
        self.listeners: list[StoreListener] = []

    @classmethod
    def in_dir(cls, state_dir: Path, *, readonly: bool = False) -> Store:
        """The store of a state dir."""
        return cls(state_dir / STORE_NAME, readonly=readonly)

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def _migrate(self) -> None:
        # Every statement of the schema is CREATE ... IF NOT EXISTS and versions only add
        # tables and indexes, so running the whole schema upgrades any older store.
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _check_version(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            self._db.close()
            raise StoreError(f"{self.path}: the store is empty (is the doctor still starting?)")
        if version < SCHEMA_VERSION:
            self._db.close()
            raise StoreError(
                f"{self.path}: store schema version is {version}: expected {SCHEMA_VERSION}"
                " (start the doctor on it once to upgrade it, or read it with that older version)"
            )
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: store schema version is {version}: expected {SCHEMA_VERSION}"
            )

    # -- incidents ---------------------------------------------------------------------------

    def open_incident(self, finding: Finding) -> Incident:
        """Create an incident whose root is ``finding``."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO incidents (category, subject, state, severity, rule, summary,"
                " opened_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    finding.category.value,
                    finding.subject,
                    IncidentState.OPEN.value,
                    int(finding.severity),
                    finding.rule,
                    finding.summary,
                    finding.at,
                    finding.at,
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
            raise KeyError(incident_id)
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
        }
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"cannot update incident fields {sorted(unknown)}")
        values = {
            k: (v.value if isinstance(v, IncidentState | Category) else v)
            for k, v in fields.items()
        }
        values = {k: (int(v) if isinstance(v, Severity | bool) else v) for k, v in values.items()}
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

    def findings(self, incident_id: int | None = None) -> list[dict[str, Any]]:
        """Stored findings as plain dicts (for the CLI and the TUI)."""
        if incident_id is None:
            rows = self._db.execute("SELECT * FROM findings ORDER BY id")
        else:
            rows = self._db.execute(
                "SELECT * FROM findings WHERE incident_id = ? ORDER BY id", (incident_id,)
            )
        out = []
        for r in rows:
            d = dict(r)
            d["severity"] = Severity(d["severity"]).label
            d["captures"] = json.loads(d["captures"])
            d["evidence"] = json.loads(d["evidence"])
            out.append(d)
        return out

    # -- actions -----------------------------------------------------------------------------

    def add_action(self, incident_id: int, result: ActionResult) -> None:
        """Record one remediation decision."""
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

    # -- launch overrides --------------------------------------------------------------------

    def set_override(self, key: str, kind: str, value: str, incident_id: int | None) -> None:
        """Remember a launch change; replaces an earlier value of the same key."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO overrides (key, kind, value, incident_id, at)"
                " VALUES (?, ?, ?, ?, ?)",
                (key, kind, value, incident_id, time.time()),
            )

    def overrides(self) -> list[Override]:
        """Every stored launch override, in the order learned."""
        rows = self._db.execute("SELECT * FROM overrides ORDER BY at, key")
        return [Override(r["key"], r["kind"], r["value"], r["incident_id"], r["at"]) for r in rows]

    def clear_overrides(self) -> int:
        """Forget every launch override; returns how many there were."""
        with self._tx() as db:
            return db.execute("DELETE FROM overrides").rowcount

    # -- meta --------------------------------------------------------------------------------

    def set_meta(self, key: str, value: Any) -> None:
        """Store a small JSON value (effective launch spec, doctor pid...)."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value))
            )

    def meta(self, key: str) -> Any:
        """A value stored with set_meta, or None."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])


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
    )


__all__ = [
    "REQUEST_KINDS",
    "SAMPLES_KEPT",
    "SCHEMA_VERSION",
    "SERVER_SPANS_KEPT",
    "STORE_NAME",
    "AlertRow",
    "Override",
    "Request",
    "Silence",
    "SpanRecord",
    "Store",
    "StoreListener",
]
