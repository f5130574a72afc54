"""The store's schema and its upgrades.

Version 1 to 3 only added tables and indexes (every statement below is ``CREATE ... IF NOT
EXISTS``); from version 4 an upgrade may also add columns and move data, step by step.
"""

from __future__ import annotations

import json
import sqlite3

SCHEMA_VERSION = 4

SCHEMA = """
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
    acknowledged INTEGER NOT NULL DEFAULT 0,
    plan TEXT NOT NULL DEFAULT '[]'
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


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in db.execute(f"PRAGMA table_info({table})")}


def _to_4(db: sqlite3.Connection) -> None:
    """Incidents carry their remediation plan; the remediation brakes' three meta entries
    become one typed ledger record (the budget already used is kept)."""
    if "plan" not in _columns(db, "incidents"):
        db.execute("ALTER TABLE incidents ADD COLUMN plan TEXT NOT NULL DEFAULT '[]'")
    old = {
        key: json.loads(value)
        for key, value in db.execute(
            "SELECT key, value FROM meta WHERE key IN"
            " ('remediation.history', 'remediation.acknowledged', 'remediation.last_run')"
        )
    }
    if old:
        ledger = {
            "history": old.get("remediation.history") or [],
            "acknowledged": old.get("remediation.acknowledged") or {},
            "last_run": old.get("remediation.last_run") or {},
        }
        db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('remediation.ledger', ?)",
            (json.dumps(ledger),),
        )
        db.execute(
            "DELETE FROM meta WHERE key LIKE 'remediation.%' AND key != 'remediation.ledger'"
        )
    # status the next doctor run writes again, now as typed records of another shape
    db.execute("DELETE FROM meta WHERE key LIKE 'collector.%' OR key = 'alerts.sinks'")


UPGRADES = {4: _to_4}
"""Version -> the step that brings a store of the version before it up to it."""


def migrate(db: sqlite3.Connection) -> None:
    """Bring the store at ``db`` to SCHEMA_VERSION (a new store is created whole)."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version >= SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in _statements(SCHEMA):
            db.execute(statement)
        for step in range(max(version, 3) + 1, SCHEMA_VERSION + 1):
            if version > 0:
                UPGRADES[step](db)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _statements(script: str) -> list[str]:
    """The script's statements (executescript would commit the upgrade's transaction)."""
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


__all__ = ["SCHEMA", "SCHEMA_VERSION", "UPGRADES", "migrate"]
