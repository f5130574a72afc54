"""The store: SQLite in WAL mode, the system of record.

The daemon writes state; the CLI and the TUI read it. One connection per
process; every write is its own short transaction so readers never wait long.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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

SCHEMA_VERSION = 3
STORE_NAME = "doctor.db"
log = logging.getLogger(__name__)

SAMPLES_KEPT = 720  # per (collector, subject): an hour at the default 5 s interval

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


class StoreListener:
    """Told of every state change the store records, after it is committed (subclass it and
    override what you need; every method is a no-op here).

    Telemetry and alerts listen here, so that every writer (incident manager, remediator,
    verifier, CLI requests the daemon carries out) is seen the same way. A listener that
    raises is logged and isolated; the write it follows stands.
    """

    def incident_changed(self, before: Incident | None, after: Incident) -> None:
        """An incident was opened (``before`` is None) or updated."""

    def finding_added(self, finding: Finding, incident_id: int | None) -> None:
        """A new finding was stored."""

    def action_added(self, incident_id: int, result: ActionResult) -> None:
        """A remediation decision was recorded."""

    def process_event(self, event: dict[str, Any]) -> None:
        """A supervisor state change was recorded (the process_events row)."""

    def sample_added(self, collector: str, subject: str, at: float, data: dict[str, Any]) -> None:
        """A collector sample was stored."""


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One finished span as stored (OTLP ids as lowercase hex)."""

    trace_id: str
    span_id: str
    parent_id: str
    """Empty for a root span."""
    name: str
    kind: str
    """``internal``, ``server``, ``client``, ``producer`` or ``consumer``."""
    start_ns: int
    end_ns: int
    status: str
    """``unset``, ``ok`` or ``error: <description>``."""
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    """Each ``{"name", "time_ns", "attributes"}``."""
    resource: dict[str, Any]
    source: str
    """``doctor`` (our own spans) or ``server`` (the server's request spans)."""
    incident_id: int | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """Something the CLI or the TUI asked the daemon to do."""

    id: int
    kind: str
    """``ack``, ``profile`` or ``next_step``."""
    incident_id: int | None
    params: dict[str, Any]
    state: str
    """``pending``, ``done`` or ``failed``."""
    result: str
    created_at: float
    done_at: float | None


REQUEST_KINDS = ("ack", "profile", "next_step")
SERVER_SPANS_KEPT = 50_000  # the server's request spans kept, newest first


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


@dataclass(frozen=True, slots=True)
class AlertRow:
    """One alert in the outbox, for one sink."""

    id: int
    """Outbox id; per (sink, dedup_key) rows are delivered in id order."""
    sink: str
    """The configured sink's name."""
    dedup_key: str
    """One key per incident: trigger, acknowledge and resolve share it."""
    incident_id: int | None
    """The incident (None for a test alert)."""
    kind: str
    """``trigger``, ``acknowledge`` or ``resolve``."""
    event: str
    """The transition: ``opened``, ``escalated``, ``resolved``, ``remediation_failed``..."""
    alert: dict[str, Any]
    """The alert document (the webhook schema); never holds a secret."""
    status: str
    """``pending``, ``sent``, ``failed`` (permanently), ``superseded`` or ``silenced``."""
    attempts: int
    """Delivery attempts made."""
    created_at: float
    """When it was queued."""
    next_at: float
    """Not attempted before this time (group wait, retry backoff)."""
    sent_at: float | None
    """When a sink accepted it."""
    last_error: str
    """Why the last attempt failed (secrets scrubbed)."""
    response: str
    """The sink's answer to the last attempt (status and the start of the body)."""


@dataclass(frozen=True, slots=True)
class Silence:
    """An operator's silence: matching alerts are not sent until it ends."""

    id: int
    """Store id."""
    category: str
    """Category matched; empty matches all."""
    subject: str
    """Subject matched (``npu3``); empty matches all."""
    comment: str
    """Why, in the operator's words."""
    created_at: float
    """When it was added."""
    until: float
    """When it ends."""


class Store:
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

    def _notify(self, call: Callable[[StoreListener], None]) -> None:
        for listener in self.listeners:
            try:
                call(listener)
            except Exception:  # a failing listener is isolated; the write stands
                log.exception("store listener %s failed", type(listener).__name__)

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

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

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

    # -- tailer offsets ----------------------------------------------------------------------

    def offset(self, identity: str) -> tuple[int, str, str] | None:
        """The checkpointed (offset, head checksum, file_id) of a device:inode identity."""
        row = self._db.execute(
            "SELECT offset, head, file_id FROM offsets WHERE identity = ?", (identity,)
        ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]))

    def offset_by_head(self, head: str) -> tuple[int, str, str] | None:
        """The newest checkpoint of a file whose first bytes have this checksum."""
        row = self._db.execute(
            "SELECT offset, head, file_id FROM offsets WHERE head = ?"
            " ORDER BY updated_at DESC LIMIT 1",
            (head,),
        ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), str(row[2]))

    def set_offsets(self, items: Sequence[tuple[str, str, int, str, str]]) -> None:
        """Checkpoint (identity, path, offset, head, file_id) in one transaction."""
        if not items:
            return
        now = time.time()
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO offsets"
                " (identity, path, offset, head, file_id, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                [(*item, now) for item in items],
            )

    # -- samples -----------------------------------------------------------------------------

    def add_sample(self, collector: str, subject: str, at: float, data: dict[str, Any]) -> None:
        """Store a sample, keeping at most SAMPLES_KEPT per (collector, subject)."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO samples (collector, subject, at, data) VALUES (?, ?, ?, ?)",
                (collector, subject, at, json.dumps(data)),
            )
            assert cur.lastrowid is not None
            db.execute(
                "DELETE FROM samples WHERE collector = ? AND subject = ? AND id <= ?",
                (collector, subject, cur.lastrowid - SAMPLES_KEPT),
            )
        self._notify(lambda li: li.sample_added(collector, subject, at, data))

    def latest_samples(self, collector: str) -> dict[str, dict[str, Any]]:
        """The newest sample of each subject of a collector."""
        rows = self._db.execute(
            "SELECT subject, at, data FROM samples WHERE id IN"
            " (SELECT MAX(id) FROM samples WHERE collector = ? GROUP BY subject)"
            " ORDER BY subject",
            (collector,),
        )
        return {r["subject"]: {"at": r["at"], **json.loads(r["data"])} for r in rows}

    # -- server state ------------------------------------------------------------------------

    def add_process_event(
        self,
        state: str,
        previous: str,
        at: float,
        pid: int | None,
        exit_code: int | None,
        crashed: bool,
        reason: str,
    ) -> None:
        """Record a supervisor state change."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO process_events (state, previous, pid, exit_code, crashed, reason, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (state, previous, pid, exit_code, int(crashed), reason, at),
            )
        row = {
            "id": cur.lastrowid,
            "state": state,
            "previous": previous,
            "pid": pid,
            "exit_code": exit_code,
            "crashed": crashed,
            "reason": reason,
            "at": at,
        }
        self._notify(lambda li: li.process_event(row))

    def process_events(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest supervisor state changes, oldest first."""
        rows = self._db.execute(
            "SELECT * FROM process_events ORDER BY id DESC LIMIT ?", (limit,)
        ).fetchall()
        return [dict(r) for r in reversed(rows)]

    # -- spans -------------------------------------------------------------------------------

    def add_spans(self, spans: Sequence[SpanRecord]) -> None:
        """Store finished spans (a span stored twice keeps its last version); the server's
        request spans are bounded to SERVER_SPANS_KEPT."""
        if not spans:
            return
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO spans (trace_id, span_id, parent_id, name, kind,"
                " start_ns, end_ns, status, attributes, events, resource, source, incident_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        s.trace_id,
                        s.span_id,
                        s.parent_id,
                        s.name,
                        s.kind,
                        s.start_ns,
                        s.end_ns,
                        s.status,
                        json.dumps(s.attributes, default=str),
                        json.dumps(s.events, default=str),
                        json.dumps(s.resource, default=str),
                        s.source,
                        s.incident_id,
                    )
                    for s in spans
                ],
            )
            if any(s.source == "server" for s in spans):
                db.execute(
                    "DELETE FROM spans WHERE source = 'server' AND rowid NOT IN (SELECT rowid"
                    " FROM spans WHERE source = 'server' ORDER BY start_ns DESC LIMIT ?)",
                    (SERVER_SPANS_KEPT,),
                )

    def spans(self, trace_id: str) -> list[SpanRecord]:
        """Every stored span of a trace, in start order."""
        rows = self._db.execute(
            "SELECT * FROM spans WHERE trace_id = ? ORDER BY start_ns, span_id", (trace_id,)
        )
        return [_span(r) for r in rows]

    def incident_trace_id(self, incident_id: int) -> str | None:
        """The trace of an incident, once any of its spans is stored."""
        row = self._db.execute(
            "SELECT trace_id FROM spans WHERE incident_id = ? LIMIT 1", (incident_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def traces(self, *, source: str | None = None, limit: int = 200) -> list[SpanRecord]:
        """The root span of the newest traces (those whose root is stored), newest first."""
        where = "parent_id = ''" + (" AND source = ?" if source else "")
        args: list[Any] = [source] if source else []
        rows = self._db.execute(
            f"SELECT * FROM spans WHERE {where} ORDER BY start_ns DESC LIMIT ?", [*args, limit]
        )
        return [_span(r) for r in rows]

    # -- requests ----------------------------------------------------------------------------

    def add_request(
        self, kind: str, incident_id: int | None, params: dict[str, Any] | None = None
    ) -> int:
        """Ask the daemon for something; returns the request id."""
        if kind not in REQUEST_KINDS:
            raise ValueError(f"unknown request kind {kind!r}: expected one of {REQUEST_KINDS}")
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO requests (kind, incident_id, params, state, result, created_at)"
                " VALUES (?, ?, ?, 'pending', '', ?)",
                (kind, incident_id, json.dumps(params or {}), time.time()),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def requests(self, *, pending_only: bool = False, limit: int = 100) -> list[Request]:
        """Requests oldest first (the pending ones, or the newest ``limit``)."""
        if pending_only:
            rows = self._db.execute("SELECT * FROM requests WHERE state = 'pending' ORDER BY id")
        else:
            rows = self._db.execute(
                "SELECT * FROM (SELECT * FROM requests ORDER BY id DESC LIMIT ?) ORDER BY id",
                (limit,),
            )
        return [
            Request(
                r["id"],
                r["kind"],
                r["incident_id"],
                json.loads(r["params"]),
                r["state"],
                r["result"],
                r["created_at"],
                r["done_at"],
            )
            for r in rows
        ]

    def finish_request(self, request_id: int, *, ok: bool, result: str) -> None:
        """Record what became of a request."""
        with self._tx() as db:
            db.execute(
                "UPDATE requests SET state = ?, result = ?, done_at = ? WHERE id = ?",
                ("done" if ok else "failed", result, time.time(), request_id),
            )

    # -- alerts (issue 9) --------------------------------------------------------------------

    def add_alert(
        self,
        sink: str,
        dedup_key: str,
        incident_id: int | None,
        kind: str,
        event: str,
        alert: dict[str, Any],
        *,
        status: str = "pending",
        next_at: float,
        now: float,
    ) -> int:
        """Queue an alert for a sink in the outbox; returns its id."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO alert_outbox (sink, dedup_key, incident_id, kind, event, alert,"
                " status, created_at, next_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    sink,
                    dedup_key,
                    incident_id,
                    kind,
                    event,
                    json.dumps(alert),
                    status,
                    now,
                    next_at,
                ),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def update_alert(self, alert_id: int, **fields: Any) -> None:
        """Change an outbox row (status, attempts, next_at, sent_at, last_error, response,
        event, alert)."""
        allowed = {"status", "attempts", "next_at", "sent_at", "last_error", "response", "event"}
        values = dict(fields)
        if "alert" in values:
            values["alert"] = json.dumps(values["alert"])
            allowed.add("alert")
        unknown = set(values) - allowed
        if unknown:
            raise ValueError(f"cannot update alert fields {sorted(unknown)}")
        sets = ", ".join(f"{k} = ?" for k in values)
        with self._tx() as db:
            db.execute(f"UPDATE alert_outbox SET {sets} WHERE id = ?", [*values.values(), alert_id])

    def alerts(
        self,
        *,
        sink: str | None = None,
        statuses: Sequence[str] = (),
        dedup_key: str | None = None,
        incident_id: int | None = None,
    ) -> list[AlertRow]:
        """Outbox rows in id order, optionally only some."""
        where, args = [], []
        for column, value in (
            ("sink", sink),
            ("dedup_key", dedup_key),
            ("incident_id", incident_id),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if statuses:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            args.extend(statuses)
        sql = "SELECT * FROM alert_outbox"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_alert_row(r) for r in self._db.execute(sql + " ORDER BY id", args)]

    def alert_counts(self) -> dict[str, dict[str, int]]:
        """Outbox rows per sink and status."""
        rows = self._db.execute(
            "SELECT sink, status, COUNT(*) FROM alert_outbox GROUP BY sink, status"
        )
        out: dict[str, dict[str, int]] = {}
        for sink, status, n in rows:
            out.setdefault(sink, {})[status] = n
        return out

    def prune_alerts(self, before: float) -> int:
        """Forget finished outbox rows queued before ``before``, keeping the newest delivered
        or pending row of each (sink, dedup_key): it says what the sink was last told."""
        with self._tx() as db:
            return db.execute(
                "DELETE FROM alert_outbox WHERE status != 'pending' AND created_at < ?"
                " AND id NOT IN (SELECT MAX(id) FROM alert_outbox"
                " WHERE status IN ('pending', 'sent') GROUP BY sink, dedup_key)",
                (before,),
            ).rowcount

    def acknowledged_incident_ids(self) -> list[int]:
        """Ids of every acknowledged incident (another process may have set the flag)."""
        rows = self._db.execute("SELECT id FROM incidents WHERE acknowledged = 1 ORDER BY id")
        return [int(r[0]) for r in rows]

    def add_silence(self, category: str, subject: str, until: float, comment: str = "") -> int:
        """Silence alerts of a category (and subject) until ``until``; returns its id."""
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO alert_silences (category, subject, comment, created_at, until)"
                " VALUES (?, ?, ?, ?, ?)",
                (category, subject, comment, time.time(), until),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def silences(self, *, active_at: float | None = None) -> list[Silence]:
        """Silences in id order; only those still running at ``active_at`` when given."""
        if active_at is None:
            rows = self._db.execute("SELECT * FROM alert_silences ORDER BY id")
        else:
            rows = self._db.execute(
                "SELECT * FROM alert_silences WHERE until > ? ORDER BY id", (active_at,)
            )
        return [
            Silence(r["id"], r["category"], r["subject"], r["comment"], r["created_at"], r["until"])
            for r in rows
        ]

    def remove_silence(self, silence_id: int) -> bool:
        """End a silence now; False when there is none with that id."""
        with self._tx() as db:
            return db.execute("DELETE FROM alert_silences WHERE id = ?", (silence_id,)).rowcount > 0

    # -- reads for the TUI (history, log sources, matched lines) ------------------------------

    def sample_history(self, collector: str, subject: str, limit: int = 60) -> list[dict[str, Any]]:
        """The newest ``limit`` samples of one subject, oldest first (each with its ``at``)."""
        rows = self._db.execute(
            "SELECT at, data FROM samples WHERE collector = ? AND subject = ?"
            " ORDER BY id DESC LIMIT ?",
            (collector, subject, limit),
        ).fetchall()
        return [{"at": r["at"], **json.loads(r["data"])} for r in reversed(rows)]

    def log_paths(self) -> list[str]:
        """Every path the tailer has checkpointed, most recently read first."""
        rows = self._db.execute(
            "SELECT path, MAX(updated_at) AS at FROM offsets GROUP BY path ORDER BY at DESC, path"
        )
        return [str(r["path"]) for r in rows]

    def matched_lines(self, path: str, since_offset: int = 0) -> dict[int, int]:
        """Byte offset -> worst severity of the findings on the lines of ``path`` at or after
        ``since_offset`` (the lines a rule matched, for highlighting)."""
        rows = self._db.execute(
            "SELECT offset, MAX(severity) FROM findings WHERE path = ? AND offset >= ?"
            " GROUP BY offset",
            (path, since_offset),
        )
        return {int(r[0]): int(r[1]) for r in rows}

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


def _span(row: sqlite3.Row) -> SpanRecord:
    return SpanRecord(
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        parent_id=row["parent_id"],
        name=row["name"],
        kind=row["kind"],
        start_ns=row["start_ns"],
        end_ns=row["end_ns"],
        status=row["status"],
        attributes=json.loads(row["attributes"]),
        events=json.loads(row["events"]),
        resource=json.loads(row["resource"]),
        source=row["source"],
        incident_id=row["incident_id"],
    )


def _alert_row(row: sqlite3.Row) -> AlertRow:
    return AlertRow(
        id=row["id"],
        sink=row["sink"],
        dedup_key=row["dedup_key"],
        incident_id=row["incident_id"],
        kind=row["kind"],
        event=row["event"],
        alert=json.loads(row["alert"]),
        status=row["status"],
        attempts=row["attempts"],
        created_at=row["created_at"],
        next_at=row["next_at"],
        sent_at=row["sent_at"],
        last_error=row["last_error"],
        response=row["response"],
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
    )


__all__ = [
    "REQUEST_KINDS",
    "SCHEMA_VERSION",
    "STORE_NAME",
    "AlertRow",
    "Override",
    "Request",
    "Silence",
    "SpanRecord",
    "Store",
    "StoreListener",
]
