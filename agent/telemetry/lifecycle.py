"""The supervised server's lifecycle as traces, from the supervisor's recorded state changes
and the server's own log lines.

Each start is a trace ``server.start`` (STARTING until RUNNING, or until it died trying)
with its phases as children, timed from vLLM's start-up lines: ``spawn`` (until the first
line), ``load_weights`` ("Loading weights took N seconds"), ``init_engine`` (until "Starting
vLLM API server"), ``wait_healthy`` (until /health answered). Each run is a ``server.run``
span (RUNNING until the exit) with the exit code, and a stop asked for is its ``server.stop``
child.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from ascend_doctor.agent.telemetry.incident_traces import ns
from ascend_doctor.core import regex
from ascend_doctor.core.events import ProcessEvent

MAX_READ = 1 << 20  # bytes of start-up output read for the phases (it is ~10 KB)
_STAMP = regex.compile(
    rb"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.\d+)? "
)
_WEIGHTS = regex.compile(rb"Loading weights took ([0-9.]+) seconds")
_WEIGHTS_GB = regex.compile(rb"Loading model weights took ([0-9.]+) GB")
_API = regex.compile(rb"Starting vLLM (?:API )?server")


@dataclass
class Phases:
    """What the start-up lines say (wall times; None when the line was not seen)."""

    first_line: float | None = None
    weights_loaded: float | None = None
    weights_seconds: float | None = None
    weights_gib: float | None = None
    api_server: float | None = None


def _stamp(m: re.Match[bytes], now: float) -> float:
    month, day, hh, mm, ss = (int(g) for g in m.groups())
    year = datetime.fromtimestamp(now).year
    t = datetime(year, month, day, hh, mm, ss).timestamp()
    if t > now + 86400:  # a December line read in January
        t = datetime(year - 1, month, day, hh, mm, ss).timestamp()
    return t


def parse_phases(text: bytes, now: float) -> Phases:
    """Phase times from vLLM's start-up output (year-less, second-resolution stamps)."""
    out = Phases()
    for line in text.splitlines():
        m = _STAMP.search(line)
        if m is None:
            continue
        t = _stamp(m, now)
        if out.first_line is None:
            out.first_line = t
        w = _WEIGHTS.search(line)
        if w is not None and out.weights_loaded is None:
            out.weights_loaded, out.weights_seconds = t, float(w.group(1))
        g = _WEIGHTS_GB.search(line)
        if g is not None:
            out.weights_gib = float(g.group(1))
        if out.api_server is None and _API.search(line):
            out.api_server = t
    return out


class LifecycleTracer:
    """Turns the supervisor's ``process_events`` rows into server traces."""

    def __init__(self, tracer: Tracer, log_path: Path | None) -> None:
        self.tracer = tracer
        self.log_path = log_path
        self._start: Span | None = None
        self._start_at = 0.0
        self._offset = 0
        self._run: Span | None = None
        self._stop: Span | None = None

    def process_event(self, event: ProcessEvent) -> None:
        """One recorded state change of the server."""
        state, at = event.state.value, event.at
        if state == "STARTING":
            self._finish_all(at, "superseded by a new start")
            self._start_at = at
            self._offset = self._size()
            self._start = self.tracer.start_span(
                "server.start",
                context=Context(),
                attributes={"server.reason": event.reason},
                start_time=ns(at),
            )
        elif state == "RUNNING":
            if self._start is not None:
                self._phases(self._start, at, healthy=True)
                self._start.set_attribute("server.pid", event.pid or 0)
                self._start.set_status(Status(StatusCode.OK))
                self._start.end(end_time=ns(at))
                self._start = None
            self._run = self.tracer.start_span(
                "server.run",
                context=Context(),
                attributes={"server.pid": event.pid or 0},
                start_time=ns(at),
            )
        elif state == "STOPPING":
            parent = self._run or self._start
            ctx = trace.set_span_in_context(parent) if parent is not None else Context()
            self._stop = self.tracer.start_span(
                "server.stop",
                context=ctx,
                attributes={"server.reason": event.reason},
                start_time=ns(at),
            )
        elif state in ("STOPPED", "EXITED", "FATAL"):
            self._exited(event, at)

    def _exited(self, event: ProcessEvent, at: float) -> None:
        code = event.exit_code
        crashed = event.crashed
        reason = event.reason
        attrs: dict[str, Any] = {"server.reason": reason, "server.crashed": crashed}
        if code is not None:
            attrs["server.exit_code"] = int(code)
        if self._stop is not None:
            self._stop.set_attributes(attrs)
            self._stop.end(end_time=ns(at))
            self._stop = None
        for span in (self._start, self._run):
            if span is None:
                continue
            span.set_attributes(attrs)
            if span is self._start:
                self._phases(span, at, healthy=False)
                span.set_status(Status(StatusCode.ERROR, reason or "did not become healthy"))
            elif crashed:
                span.set_status(Status(StatusCode.ERROR, reason))
            span.end(end_time=ns(at))
        self._start = self._run = None

    def _finish_all(self, at: float, why: str) -> None:
        for span in (self._stop, self._start, self._run):
            if span is not None:
                span.set_attribute("server.reason", why)
                span.end(end_time=ns(at))
        self._stop = self._start = self._run = None

    def close(self) -> None:
        """The doctor stops: end what is open."""
        self._finish_all(time.time(), "doctor stopped")

    def _size(self) -> int:
        try:
            return self.log_path.stat().st_size if self.log_path is not None else 0
        except OSError:
            return 0

    def _phases(self, parent: Span, end: float, *, healthy: bool) -> None:
        if self.log_path is None:
            return
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                text = f.read(MAX_READ)
        except OSError:
            return
        p = parse_phases(text, time.time())
        start = self._start_at

        def clamp(t: float | None) -> float | None:
            return None if t is None else min(max(t, start), end)

        ctx = trace.set_span_in_context(parent)
        marks: list[tuple[str, float, float, dict[str, Any]]] = []
        first = clamp(p.first_line)
        if first is not None:
            marks.append(("spawn", start, first, {}))
        loaded = clamp(p.weights_loaded)
        if loaded is not None and p.weights_seconds is not None:
            attrs: dict[str, Any] = {"server.weights.seconds": p.weights_seconds}
            if p.weights_gib is not None:
                attrs["server.weights.gib"] = p.weights_gib
            began = max(loaded - p.weights_seconds, first or start)
            marks.append(("load_weights", min(began, loaded), loaded, attrs))
        api = clamp(p.api_server)
        if api is not None and loaded is not None:
            marks.append(("init_engine", loaded, max(api, loaded), {}))
        if healthy and api is not None:
            marks.append(("wait_healthy", api, end, {}))
        for name, t0, t1, attrs in marks:
            attrs["server.phase.seconds"] = round(t1 - t0, 3)
            parent.set_attribute(f"server.phase.{name}.seconds", round(t1 - t0, 3))
            span = self.tracer.start_span(name, context=ctx, attributes=attrs, start_time=ns(t0))
            span.end(end_time=ns(t1))


__all__ = ["LifecycleTracer", "Phases", "parse_phases"]
