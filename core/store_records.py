"""The store's typed records (``core/records.py``) and launch overrides: what the daemon tells
its readers about itself, the server, its collectors, alert sinks and captures. Part of
:class:`ascend_doctor.core.store.Store`.

Each record has one key and one pair of methods; nothing outside this module names a key.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, TypeVar

from ascend_doctor.core.records import (
    Artifact,
    CollectorStatus,
    DoctorStatus,
    InFlight,
    LaunchRecord,
    Ledger,
    ProfilingSetup,
    ServerStatus,
    ServerVersion,
    SinkStatus,
    decode,
    encode,
)
from ascend_doctor.core.redact import redact
from ascend_doctor.core.store_base import StoreBase

R = TypeVar("R")

DOCTOR = "doctor"
SERVER = "server"
LAUNCH = "launch"
PROFILING = "profiling"
VERSION = "server_version"
ARTIFACTS = "artifacts"
SINKS = "alerts.sinks"
LEDGER = "remediation.ledger"
INFLIGHT = "remediation.inflight"
COLLECTOR = "collector."


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


class RecordsMixin(StoreBase):
    """Typed records, overrides and the small meta values their owners keep."""

    # -- typed records -------------------------------------------------------------------------

    def set_doctor(self, status: DoctorStatus) -> None:
        """The running doctor announces itself."""
        self.set_meta(DOCTOR, encode(status))

    def doctor(self) -> DoctorStatus | None:
        """The doctor that last ran on this store (StoreError: unreadable)."""
        return self._record(DoctorStatus, DOCTOR)

    def set_server(self, status: ServerStatus) -> None:
        """The server's state changed."""
        self.set_meta(SERVER, encode(status))

    def server(self) -> ServerStatus | None:
        """The server's last recorded state."""
        return self._record(ServerStatus, SERVER)

    def set_launch(self, launch: LaunchRecord) -> None:
        """The server command as given, its secret flags and env vars redacted (``status``
        and bundles show it; the doctor relaunches from its own command line)."""
        argv, env = tuple(redact(list(launch.argv))), redact(dict(launch.env))
        self.set_meta(LAUNCH, encode(LaunchRecord(argv, env)))

    def launch(self) -> LaunchRecord | None:
        """The server command as given (overrides not applied)."""
        return self._record(LaunchRecord, LAUNCH)

    def set_profiling(self, setup: ProfilingSetup) -> None:
        """How the server can be profiled."""
        self.set_meta(PROFILING, encode(setup))

    def profiling(self) -> ProfilingSetup | None:
        """How the server can be profiled, when profiling is on."""
        return self._record(ProfilingSetup, PROFILING)

    def set_server_version(self, version: ServerVersion) -> None:
        """The vLLM release the server runs."""
        self.set_meta(VERSION, encode(version))

    def server_version(self) -> ServerVersion | None:
        """The vLLM release the server runs, when known."""
        return self._record(ServerVersion, VERSION)

    def set_collector(self, status: CollectorStatus) -> None:
        """One collector's state after a run."""
        self.set_meta(COLLECTOR + status.name, encode(status))

    def collectors(self) -> dict[str, CollectorStatus]:
        """Every collector's last state, by name."""
        rows = self._db.execute(
            "SELECT key, value FROM meta WHERE key LIKE ? ORDER BY key", (COLLECTOR + "%",)
        )
        return {
            str(k)[len(COLLECTOR) :]: decode(CollectorStatus, json.loads(v), str(k))
            for k, v in rows
        }

    def add_artifact(self, artifact: Artifact) -> None:
        """A captured profile (kept in order)."""
        self.set_meta(ARTIFACTS, [*map(encode, self.artifacts()), encode(artifact)])

    def artifacts(self) -> list[Artifact]:
        """Every captured profile, oldest first."""
        raw = self.meta(ARTIFACTS) or []
        if not isinstance(raw, list):
            raw = [raw]  # decode names the key and says what it holds
        return [decode(Artifact, a, ARTIFACTS) for a in raw]

    def set_sinks(self, sinks: dict[str, SinkStatus]) -> None:
        """Every alert sink's delivery state."""
        self.set_meta(SINKS, {name: encode(s) for name, s in sinks.items()})

    def sinks(self) -> dict[str, SinkStatus]:
        """Every alert sink's delivery state, by sink name."""
        raw = self.meta(SINKS) or {}
        return decode(dict[str, SinkStatus], raw, SINKS)

    def set_ledger(self, ledger: Ledger) -> None:
        """The remediation brakes' memory."""
        self.set_meta(LEDGER, encode(ledger))

    def set_inflight(self, flight: InFlight | None) -> None:
        """The action running now (None: none); written before it acts, cleared after."""
        self.set_meta(INFLIGHT, None if flight is None else encode(flight))

    def inflight(self) -> InFlight | None:
        """An action a dead doctor left running (None: none)."""
        raw = self.meta(INFLIGHT)
        return None if raw is None else decode(InFlight, raw, INFLIGHT)

    def ledger(self) -> Ledger:
        """The remediation brakes' memory (empty on a new store; StoreError: corrupt)."""
        return self._record(Ledger, LEDGER) or Ledger()

    def _record(self, cls: type[R], key: str) -> R | None:
        raw = self.meta(key)
        return None if raw is None else decode(cls, raw, key)

    # -- small values kept by their one owner --------------------------------------------------

    def set_meta(self, key: str, value: Any) -> None:
        """Store a small JSON value under ``key``. For a value only its writer reads again
        (a checkpoint time, a salt); what others read is a typed record above."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value))
            )

    def meta(self, key: str) -> Any:
        """A value stored with set_meta, or None."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def meta_items(self) -> dict[str, Any]:
        """Every meta value by key (the support bundle copies them whole)."""
        return {str(k): json.loads(v) for k, v in self._db.execute("SELECT key, value FROM meta")}

    # -- launch overrides ----------------------------------------------------------------------

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


__all__ = ["Override", "RecordsMixin"]
