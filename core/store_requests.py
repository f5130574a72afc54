"""The requests the CLI and the TUI leave for the daemon (acknowledge, capture a profile, run
the next step): the TUI stays a reader of state and the daemon carries them out. Part of
:class:`ascend_doctor.core.store.Store`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.store_base import StoreBase


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


class RequestsMixin(StoreBase):
    """Requests to the daemon."""

    def add_request(
        self, kind: str, incident_id: int | None, params: dict[str, Any] | None = None
    ) -> int:
        """Ask the daemon for something; returns the request id."""
        if kind not in REQUEST_KINDS:
            raise StoreError(f"unknown request kind {kind!r}: expected one of {REQUEST_KINDS}")
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


__all__ = ["REQUEST_KINDS", "Request", "RequestsMixin"]
