"""What the screens show, read from the store in one go (in a worker thread, never on the
event loop) into frozen views the widgets only display.

No Textual here: the loaders are plain functions over a :class:`Source`, so the benchmark and
the tests call them directly.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import (
    ACTIVE_STATES,
    IncidentState,
    ProcessState,
    Severity,
)
from ascend_doctor.core.procs import pid_alive
from ascend_doctor.core.store import STORE_NAME, Store

SERVER_LOG = "server.log"
LOG_TAIL_BYTES = 32 * 1024  # what the overview's log pane reads from the end of the log
MAX_COUNT_BYTES = 64 << 20  # evidence line numbers are counted in files up to this offset
HISTORY = 30  # samples per device kept for the sparklines


DEMO_DONE = "demo-finished"
"""The file in which ``ascend-doctor demo`` says its tour is over (the header shows it)."""


class NoDoctor(Exception):
    """A request with no doctor running to carry it out."""


class Source:
    """Where the TUI reads from: a store file, and the state dir its logs live in.

    Every read opens a short read-only connection in the calling (worker) thread, so the TUI
    holds no lock on the store and a store that appears later (a starting doctor) is picked up.
    The one writable connection is opened only to add a request.
    """

    def __init__(
        self,
        store_path: Path,
        state_dir: Path | None = None,
        servers: Sequence[tuple[str, Path]] = (),
    ) -> None:
        self.store_path = store_path
        self.state_dir = state_dir if state_dir is not None else store_path.parent
        self.servers = list(servers)
        """(name, state dir) of each server of a doctor of several; the first is shown."""
        self.server = ""
        """The name of the server shown ('' with one)."""
        self._lock = threading.Lock()
        self._lines: dict[tuple[str, int], int] = {}
        if self.servers:
            self._show(0)

    def next_server(self) -> str:
        """Show the next of several servers; its name ('' with one)."""
        if self.servers:
            names = [n for n, _ in self.servers]
            self._show((names.index(self.server) + 1) % len(names))
        return self.server

    def _show(self, i: int) -> None:
        with self._lock:  # a refresh in a worker never reads half of the switch
            self.server, self.state_dir = self.servers[i]
            self.store_path = self.state_dir / STORE_NAME

    @classmethod
    def for_state_dir(cls, state_dir: Path) -> Source:
        """The store and logs of a doctor's state dir."""
        return cls(state_dir / STORE_NAME, state_dir)

    @contextmanager
    def reader(self) -> Iterator[Store]:
        """A read-only store for one refresh (StoreError when there is none yet)."""
        with self._lock:
            store = Store(self.store_path, readonly=True)
            try:
                yield store
            finally:
                store.close()

    def add_request(
        self, kind: str, incident_id: int | None, alive: Callable[[int], bool] = pid_alive
    ) -> tuple[int, bool]:
        """Ask the daemon for something (the TUI's only write): (request id, newly queued).
        The same request still pending is not queued twice; with no doctor running to carry
        it out nothing is queued (:class:`NoDoctor`)."""
        with self._lock:
            store = Store(self.store_path)
            try:
                doctor = store.doctor()
                if doctor is None or doctor.pid <= 0 or not alive(doctor.pid):
                    raise NoDoctor("the doctor is not running: nothing was queued")
                for r in store.requests(pending_only=True):
                    if (r.kind, r.incident_id) == (kind, incident_id):
                        return r.id, False
                return store.add_request(kind, incident_id, {"from": "tui"}), True
            finally:
                store.close()

    def note(self) -> str:
        """The demo's last word, once its tour is over (``DEMO_DONE`` in the state dir)."""
        try:
            return (self.state_dir / DEMO_DONE).read_text(encoding="utf-8").strip()[:120]
        except OSError:
            return ""

    def display(self, path: str) -> str:
        """A path as shown: relative to the state dir when under it, else its last two parts."""
        p = Path(path)
        try:
            return str(p.relative_to(self.state_dir))
        except ValueError:
            return str(Path(p.parent.name) / p.name) if p.parent.name else p.name

    def line_number(self, path: str, offset: int, text: str) -> int:
        """The 1-based line number of the line at ``offset`` of ``path`` when that line still
        reads ``text`` (a rotated file is not miscounted), else 0. Cached: lines before an
        offset do not change."""
        key = (path, offset)
        cached = self._lines.get(key)
        if cached is not None:
            return cached
        number = 0
        if offset <= MAX_COUNT_BYTES:
            full = Path(path) if Path(path).is_absolute() else self.state_dir / path
            try:
                with open(full, "rb") as fh:
                    fh.seek(offset)
                    line = fh.readline().rstrip(b"\r\n").decode("utf-8", "replace")
                    if line == text and fh.tell() > offset:
                        fh.seek(0)
                        count, left = 0, offset
                        while left > 0:
                            block = fh.read(min(left, 1 << 20))
                            if not block:
                                break
                            count += block.count(b"\n")
                            left -= len(block)
                        number = count + 1 if left == 0 else 0
            except OSError:
                number = 0
        self._lines[key] = number
        return number

    def log_sources(self, store: Store | None) -> list[str]:
        """The server log of the state dir first, then every file the tailer follows."""
        paths: list[str] = []
        server = self.state_dir / SERVER_LOG
        if server.exists():
            paths.append(str(server))
        if store is not None:
            known = store.log_paths()
            # a server log first (a rebuilt bundle's is not in the state dir itself)
            known.sort(key=lambda p: Path(p).name != SERVER_LOG)
            paths.extend(p for p in known if p not in paths)
        return paths


# -- the overview ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeaderView:
    """The header: is the doctor alive, what the server does, what was learned."""

    doctor_alive: bool
    """A doctor process with the stored pid exists."""
    doctor_pid: int | None
    mode: str
    """Remediation mode (auto, suggest, off) or ``unknown``."""
    server_state: str
    server_since: float | None
    """When the server entered its state (uptime when RUNNING)."""
    restarts: int
    """Server starts after the first since the doctor started."""
    overrides: tuple[str, ...]
    """Current launch overrides as ``--flag=value`` / ``ENV=value``."""
    store_ok: bool = True
    """False when there is no readable store (yet)."""
    problem: str = ""
    """Why the store could not be read."""
    note: str = ""
    """What the state dir says of itself: the demo's tour has finished."""


@dataclass(frozen=True, slots=True)
class DeviceView:
    """One NPU row."""

    subject: str
    health: str
    hbm_used_mb: float | None
    hbm_total_mb: float | None
    aicore_pct: float | None
    temp_c: float | None
    power_w: float | None
    hbm_history: tuple[float, ...]
    """HBM used percent, oldest first."""
    aicore_history: tuple[float, ...]
    """AI Core percent, oldest first."""
    at: float


@dataclass(frozen=True, slots=True)
class ServerView:
    """The newest vLLM sample, with the rates derived from the one before it."""

    health_status: int | None
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    """0..1."""
    tokens_per_s: float | None
    ttft_p99: float | None
    """Seconds."""
    at: float | None
    tokens_history: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class IncidentRow:
    """One line of an incident list."""

    id: int
    state: str
    severity: int
    category: str
    subject: str
    summary: str
    opened_at: float
    resolved_at: float | None
    acknowledged: bool
    attempts: int


@dataclass(frozen=True, slots=True)
class LogLineView:
    """One log line; ``severity`` set when a rule matched it."""

    offset: int
    text: str
    severity: int | None = None


@dataclass(frozen=True, slots=True)
class Overview:
    """Everything the overview screen shows."""

    header: HeaderView
    devices: tuple[DeviceView, ...]
    server: ServerView
    incidents: tuple[IncidentRow, ...]
    """Open ones first, then the most recent others."""
    log_path: str
    log_lines: tuple[LogLineView, ...]


RECENT_INCIDENTS = 50


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def load_header(store: Store, alive: Callable[[int], bool]) -> HeaderView:
    """The header from the store's meta, process events and overrides."""
    try:
        doctor, server = store.doctor(), store.server()
    except StoreError:
        doctor = server = None  # unreadable: shown as unknown
    pid = doctor.pid if doctor is not None and doctor.pid > 0 else None
    started = doctor.started_at if doctor is not None else 0.0
    starts = [
        e
        for e in store.process_events(limit=500)
        if e.state == ProcessState.STARTING and e.at >= started
    ]
    overrides = tuple(
        (o.key if o.kind == "flag" else f"{o.key}={o.value}") for o in store.overrides()
    )
    return HeaderView(
        doctor_alive=pid is not None and alive(pid),
        doctor_pid=pid,
        mode=doctor.mode if doctor is not None else "unknown",
        server_state=server.state.value if server is not None else "not supervised",
        server_since=server.since if server is not None else None,
        restarts=max(0, len(starts) - 1),
        overrides=overrides,
    )


def load_devices(store: Store, history: int = HISTORY) -> tuple[DeviceView, ...]:
    """One row per NPU from the npu_smi samples, with their recent history."""
    out = []
    for subject, latest in sorted(store.latest_samples("npu_smi").items(), key=_npu_order):
        past = store.sample_history("npu_smi", subject, history)
        out.append(
            DeviceView(
                subject=subject,
                health=str(latest.get("health") or "?"),
                hbm_used_mb=_num(latest.get("hbm_used_mb")),
                hbm_total_mb=_num(latest.get("hbm_total_mb")),
                aicore_pct=_num(latest.get("aicore_pct")),
                temp_c=_num(latest.get("temp_c")),
                power_w=_num(latest.get("power_w")),
                hbm_history=tuple(_num(s.get("hbm_used_pct")) or 0.0 for s in past),
                aicore_history=tuple(_num(s.get("aicore_pct")) or 0.0 for s in past),
                at=float(latest["at"]),
            )
        )
    return tuple(out)


def _npu_order(item: tuple[str, Any]) -> tuple[int, str]:
    digits = "".join(c for c in item[0].split(".")[0] if c.isdigit())
    return (int(digits) if digits else 1 << 30, item[0])


def load_server(store: Store, history: int = HISTORY) -> ServerView:
    """The server panel from the vllm samples."""
    past = store.sample_history("vllm", "server", history)
    if not past:
        return ServerView(None, None, None, None, None, None, None)
    rates: list[float] = []
    for before, after in pairwise(past):
        dt = after["at"] - before["at"]
        delta = _num(after.get("generation_tokens_delta"))
        rates.append(delta / dt if delta is not None and dt > 0 else 0.0)
    last = past[-1]
    return ServerView(
        health_status=int(last["health_status"]) if "health_status" in last else None,
        running=_num(last.get("running")),
        waiting=_num(last.get("waiting")),
        kv_cache_usage=_num(last.get("kv_cache_usage")),
        tokens_per_s=rates[-1] if rates and "generation_tokens_delta" in last else None,
        ttft_p99=_num(last.get("ttft_p99")),
        at=float(last["at"]),
        tokens_history=tuple(rates),
    )


def incident_row(inc: Any) -> IncidentRow:
    """An Incident as a list row."""
    return IncidentRow(
        id=inc.id,
        state=inc.state.value,
        severity=int(inc.severity),
        category=inc.category.value,
        subject=inc.subject,
        summary=inc.summary,
        opened_at=inc.opened_at,
        resolved_at=inc.resolved_at,
        acknowledged=inc.acknowledged,
        attempts=inc.attempts,
    )


def load_incidents(store: Store, recent: int = RECENT_INCIDENTS) -> tuple[IncidentRow, ...]:
    """The open incidents, then those waiting for a human (escalated, not acknowledged), then
    the newest others, newest first within each."""
    active = [incident_row(i) for i in store.incidents(states=ACTIVE_STATES)]
    done = (IncidentState.RESOLVED, IncidentState.ESCALATED)
    others = [incident_row(i) for i in reversed(store.incidents(states=done, newest=recent))]
    others.sort(key=lambda r: r.acknowledged or r.state != IncidentState.ESCALATED.value)
    return tuple(reversed(active)) + tuple(others)


def read_tail(path: str, max_bytes: int = LOG_TAIL_BYTES) -> tuple[int, list[tuple[int, str]]]:
    """The whole lines in the last ``max_bytes`` of a file: (start offset, [(offset, text)])."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes)
            fh.seek(start)
            data = fh.read(size - start)
    except OSError:
        return 0, []
    offset = start
    if start > 0:  # drop the partial first line
        cut = data.find(b"\n")
        if cut < 0:
            return start, []
        data = data[cut + 1 :]
        offset = start + cut + 1
    end = data.rfind(b"\n")
    data = data[: end + 1] if end >= 0 else b""
    first = offset
    lines: list[tuple[int, str]] = []
    for raw in data.split(b"\n")[:-1]:
        lines.append((offset, raw.decode("utf-8", "replace")))
        offset += len(raw) + 1
    return first, lines


def load_log_tail(
    store: Store | None, path: str, max_bytes: int = LOG_TAIL_BYTES
) -> tuple[LogLineView, ...]:
    """The tail of a log, each line marked with the worst severity a rule found on it."""
    if not path:
        return ()
    first, lines = read_tail(path, max_bytes)
    marks = store.matched_lines(path, first) if store is not None and lines else {}
    return tuple(LogLineView(off, text, marks.get(off)) for off, text in lines)


def load_overview(source: Source, alive: Callable[[int], bool] = pid_alive) -> Overview:
    """Everything the overview shows, in one read of the store and one of the log."""
    try:
        with source.reader() as store:
            header = replace(load_header(store, alive), note=source.note())
            devices = load_devices(store)
            server = load_server(store)
            incidents = load_incidents(store)
            sources = source.log_sources(store)
            log_path = sources[0] if sources else ""
            lines = load_log_tail(store, log_path)
    except (StoreError, sqlite3.Error) as exc:
        header = HeaderView(False, None, "unknown", "unknown", None, 0, (), False, str(exc))
        sources = source.log_sources(None)
        log_path = sources[0] if sources else ""
        return Overview(
            header,
            (),
            ServerView(None, None, None, None, None, None, None),
            (),
            log_path,
            load_log_tail(None, log_path),
        )
    return Overview(header, devices, server, incidents, log_path, lines)


# -- one incident ------------------------------------------------------------------------------


def severity_label(value: int | None) -> str:
    """``critical``, ``error``, ... for a stored severity number."""
    if value is None:
        return ""
    try:
        return Severity(value).label
    except ValueError:
        return str(value)


__all__ = [
    "DeviceView",
    "HeaderView",
    "IncidentRow",
    "LogLineView",
    "Overview",
    "ServerView",
    "Source",
    "load_overview",
    "read_tail",
    "severity_label",
]
