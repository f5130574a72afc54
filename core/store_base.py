"""What every part of the store shares: the connection and its short write transactions."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import ActionResult, Finding, Incident, ProcessEvent
from ascend_doctor.core.store_degraded import write_back

log = logging.getLogger("ascend_doctor.core.store")
RETRY_S = 5.0
"""Seconds between two tries to write a degraded (in-memory) store back to its file."""


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

    def process_event(self, event: ProcessEvent) -> None:
        """A supervisor state change was recorded."""

    def sample_added(self, collector: str, subject: str, at: float, data: dict[str, Any]) -> None:
        """A collector sample was stored."""


class StoreBase:
    """The connection; each write is its own short ``BEGIN IMMEDIATE`` transaction."""

    _db: sqlite3.Connection
    listeners: list[StoreListener]
    write_errors = 0
    """Writes that failed (disk full, read-only, corrupt): counted, logged once a minute."""
    _reported_at = float("-inf")
    path: Path
    degraded = ""
    """Why the store lives in memory (its file could not be written at start-up), or ''."""
    _write_back = False
    _tried_at = float("-inf")
    clock: Callable[[], float]
    """Monotonic seconds: when a failed write is reported, a degraded store retried."""

    def _notify(self, call: Callable[[StoreListener], None]) -> None:
        for listener in self.listeners:
            try:
                call(listener)
            except Exception:  # a failing listener is isolated; the write stands
                log.exception("store listener %s failed", type(listener).__name__)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        # A write that fails (a full disk, a read-only or corrupt file) is a StoreError the
        # caller isolates: the store never takes supervision down with it.
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            if self.degraded:
                self._unsaved()
        except sqlite3.IntegrityError:
            raise  # a constraint the caller relies on (a finding seen twice), not a fault
        except sqlite3.Error as exc:
            self.write_errors += 1
            now = self.clock()
            if now - self._reported_at >= 60:
                self._reported_at = now
                log.error("store write failed (%d so far): %s", self.write_errors, exc)
            raise StoreError(f"store write failed: {exc}") from None

    def _unsaved(self) -> None:
        """A write went to the memory store only: counted, reported once a minute, and the
        file tried again (a failed ``open()`` every few seconds at most)."""
        self.write_errors += 1
        now = self.clock()
        if self._write_back and now - self._tried_at >= RETRY_S:
            self._tried_at = now
            disk = write_back(self._db, self.path)
            if disk is not None:
                disk.row_factory = self._db.row_factory
                self._db.close()
                self._db, self.degraded = disk, ""
                log.warning("%s can be written again: what was kept in memory is saved", self.path)
                return
        if now - self._reported_at >= 60:
            self._reported_at = now
            log.error(
                "store write failed (%d so far): %s cannot be written (%s); kept in memory",
                self.write_errors,
                self.path,
                self.degraded,
            )


__all__ = ["RETRY_S", "StoreBase", "StoreListener"]
