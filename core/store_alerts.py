"""The store's alert outbox and silences: every alert is written here before any sink sees it.
Part of :class:`ascend_doctor.core.store.Store`."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.store_base import StoreBase


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


class AlertsMixin(StoreBase):
    """The outbox and the silences."""

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
            raise StoreError(f"cannot update alert fields {sorted(unknown)}")
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


__all__ = ["AlertRow", "AlertsMixin", "Silence"]
