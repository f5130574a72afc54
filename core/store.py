"""The store: SQLite in WAL mode, the system of record.

The daemon writes state; the CLI and the TUI read it. One connection per process; every
write is its own short transaction so readers never wait long. Each concern lives in its own
mixin: incidents and their findings and decisions (``store_incidents``), typed records and
overrides (``store_records``), the host's checkpoints, samples and process events
(``store_host``), spans (``store_spans``), requests to the daemon (``store_requests``) and the
alert outbox (``store_alerts``); the schema and its upgrades are ``store_schema``.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import time
from pathlib import Path

from ascend_doctor.core import regex
from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.safeio import private_dir
from ascend_doctor.core.statelock import lock_state_dir
from ascend_doctor.core.store_alerts import AlertRow, AlertsMixin, Silence
from ascend_doctor.core.store_base import StoreListener
from ascend_doctor.core.store_degraded import open_in_memory
from ascend_doctor.core.store_host import SAMPLES_KEPT, HostMixin
from ascend_doctor.core.store_incidents import (
    IncidentNotFound,
    IncidentsMixin,
    Plan,
    StoredFinding,
)
from ascend_doctor.core.store_records import Override, RecordsMixin
from ascend_doctor.core.store_requests import REQUEST_KINDS, Request, RequestsMixin
from ascend_doctor.core.store_schema import SCHEMA_VERSION, migrate
from ascend_doctor.core.store_spans import SERVER_SPANS_KEPT, SpanRecord, SpansMixin

STORE_NAME = "doctor.db"
log = logging.getLogger(__name__)


class Store(IncidentsMixin, RecordsMixin, HostMixin, SpansMixin, RequestsMixin, AlertsMixin):
    """Typed access to the SQLite store."""

    def __init__(self, path: Path, *, readonly: bool = False, lock: bool = False) -> None:
        self.path = path
        self.clock = time.monotonic
        # ``lock``: the daemon's store, held by one doctor at a time (statelock.py); it never
        # stops start-up for a store it cannot write: that store lives in memory meanwhile
        self._lock = lock_state_dir(path.parent) if lock and not readonly else None
        try:
            if readonly:
                if not path.exists():
                    raise StoreError(
                        f"{path}: no store here (has the doctor run with this state dir?)"
                    )
                self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
            else:
                try:
                    self._db = _open_moving_corrupt(path)
                except (OSError, sqlite3.Error) as exc:
                    if not lock or "locked" in str(exc):  # busy is not read-only: an error
                        raise
                    self._go_degraded(exc)
        except sqlite3.Error as exc:
            raise StoreError(f"{path}: cannot open store: {exc}") from None
        self._db.row_factory = sqlite3.Row
        self._check_version()
        self.listeners: list[StoreListener] = []

    def _go_degraded(self, exc: BaseException) -> None:
        self._db, self._write_back = open_in_memory(self.path)
        self.degraded = f"{exc}"
        log.critical(
            "%s cannot be written (%s): the doctor supervises with a store in memory, written"
            " back when the file can be written again; status and incidents show the old store"
            " meanwhile",
            self.path,
            exc,
        )

    @classmethod
    def in_dir(cls, state_dir: Path, *, readonly: bool = False, lock: bool = False) -> Store:
        """The store of a state dir (``lock``: held by this process alone until closed)."""
        return cls(state_dir / STORE_NAME, readonly=readonly, lock=lock)

    def close(self) -> None:
        """Close the connection (and release the state dir's lock)."""
        self._db.close()
        if self._lock is not None:
            self._lock.close()

    def _check_version(self) -> None:
        try:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:  # not a database, or a damaged one
            self._db.close()
            raise StoreError(
                f"{self.path}: not a readable store ({exc}); the doctor moves a corrupt store"
                " aside when it starts"
            ) from None
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


_CORRUPT = regex.compile(r"not a database|malformed|corrupt", re.IGNORECASE)


def _open_moving_corrupt(path: Path) -> sqlite3.Connection:
    private_dir(path.parent)  # the state dir: 0700, whatever the umask
    # SQLite opens a file it cannot write read-only without a word: ask first
    if path.exists():
        with open(path, "r+b"):
            pass
    try:
        return _open_writable(path)
    except sqlite3.DatabaseError as exc:
        if not _CORRUPT.search(str(exc)):
            raise
        why = exc
    # a corrupt store must not keep the server down: kept for a post-mortem
    aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
    for x in ("", "-wal", "-shm"):
        if path.with_name(path.name + x).exists():
            path.with_name(path.name + x).rename(aside.with_name(aside.name + x))
    log.critical("%s is corrupt (%s): moved to %s, a fresh store starts", path, why, aside)
    return _open_writable(path)


def _open_writable(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=5.0, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        for part in (path, *(path.with_name(path.name + x) for x in ("-wal", "-shm"))):
            if part.exists():
                os.chmod(part, 0o600)
        db.execute("PRAGMA synchronous=NORMAL")
        migrate(db)
    except BaseException:
        db.close()
        raise
    return db


__all__ = [
    "REQUEST_KINDS",
    "SAMPLES_KEPT",
    "SCHEMA_VERSION",
    "SERVER_SPANS_KEPT",
    "STORE_NAME",
    "AlertRow",
    "IncidentNotFound",
    "Override",
    "Plan",
    "Request",
    "Silence",
    "SpanRecord",
    "Store",
    "StoreListener",
    "StoredFinding",
]
