"""The store's record of the host: tailer checkpoints, collector samples (bounded), the
supervisor's state changes, and the reads the TUI makes of them. Part of
:class:`ascend_doctor.core.store.Store`."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from ascend_doctor.core.events import ProcessEvent, ProcessState
from ascend_doctor.core.store_base import StoreBase

SAMPLES_KEPT = 720  # per (collector, subject): an hour at the default 5 s interval


class HostMixin(StoreBase):
    """Offsets, samples, process events."""

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

    def sample_series(
        self, collector: str, subject: str, since: float
    ) -> list[tuple[float, dict[str, Any]]]:
        """(time, values) of a subject's samples since ``since``, oldest first."""
        rows = self._db.execute(
            "SELECT at, data FROM samples WHERE collector = ? AND subject = ? AND at >= ?"
            " ORDER BY id",
            (collector, subject, since),
        )
        return [(r["at"], json.loads(r["data"])) for r in rows]

    # -- server state ------------------------------------------------------------------------

    def add_process_event(self, event: ProcessEvent) -> None:
        """Record a supervisor state change."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO process_events (state, previous, pid, exit_code, crashed, reason, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    event.state.value,
                    event.previous.value,
                    event.pid,
                    event.exit_code,
                    int(event.crashed),
                    event.reason,
                    event.at,
                ),
            )
        self._notify(lambda li: li.process_event(event))

    def process_events(self, limit: int = 100) -> list[ProcessEvent]:
        """The newest supervisor state changes, oldest first."""
        rows = self._db.execute(
            "SELECT * FROM process_events ORDER BY id DESC LIMIT ?", (limit,)
        ).fetchall()
        return [
            ProcessEvent(
                state=ProcessState(r["state"]),
                previous=ProcessState(r["previous"]),
                at=r["at"],
                pid=r["pid"],
                exit_code=r["exit_code"],
                crashed=bool(r["crashed"]),
                reason=r["reason"],
            )
            for r in reversed(rows)
        ]

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


__all__ = ["SAMPLES_KEPT", "HostMixin"]
