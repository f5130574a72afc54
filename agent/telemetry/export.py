"""Where spans and metrics go: the store (always), an OTLP endpoint (when configured).

The OTLP side never blocks the daemon: spans wait in a bounded queue that a worker thread
(the SDK's exporters are blocking) drains in batches; a full queue drops the span and a
failed export drops its batch, and both are counted. Exports have a short timeout, so a
dead endpoint delays neither the loop nor shutdown by more than that.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from opentelemetry.context import Context
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ascend_doctor.agent.telemetry.span_codec import record_of
from ascend_doctor.core.config import TelemetryConfig
from ascend_doctor.core.errors import ConfigError
from ascend_doctor.core.store import Store

log = logging.getLogger(__name__)


class StoreSpanExporter(SpanExporter):
    """Writes every finished span into the store (``spans`` table, source ``doctor``).

    Used with a SimpleSpanProcessor: our spans end on the daemon's loop thread, which owns
    the store's connection, so the write happens there, one short transaction per span.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.failures = 0
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Store the spans; a failure is logged and counted, never raised."""
        if self._closed:
            return SpanExportResult.FAILURE
        try:
            self.store.add_spans([record_of(s) for s in spans])
        except Exception:  # the store is the daemon's business; telemetry only counts
            self.failures += 1
            log.exception("storing %d spans failed", len(spans))
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Stop writing (the daemon closes the store after this)."""
        self._closed = True


class BoundedSpanProcessor(SpanProcessor):
    """A batching span processor with a bounded queue and exact drop counts.

    Like the SDK's BatchSpanProcessor, but it counts what it drops (queue full, export
    failed), which the SDK only reports as a log line.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_size: int = 2048,
        max_batch: int = 512,
        delay: float = 1.0,
    ) -> None:
        self.exporter = exporter
        self.max_queue_size = max_queue_size
        self.max_batch = max_batch
        self.delay = delay
        self.queued = 0
        """Spans accepted into the queue."""
        self.exported = 0
        """Spans the endpoint accepted."""
        self.dropped = 0
        """Spans lost: queue full, export failed, or still queued at shutdown."""
        self._queue: deque[ReadableSpan] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._failing = False  # the last export failed: no last attempt at shutdown
        self._thread = threading.Thread(target=self._work, name="otlp-spans", daemon=True)
        self._thread.start()

    @property
    def failing(self) -> bool:
        """Whether the last export failed."""
        return self._failing

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do at start."""

    def on_end(self, span: ReadableSpan) -> None:
        """Queue the span, or drop and count it when the queue is full."""
        with self._lock:
            if self._stop or len(self._queue) >= self.max_queue_size:
                self.dropped += 1
                return
            self._queue.append(span)
            self.queued += 1
            if len(self._queue) >= self.max_batch:
                self._wake.set()

    def _take(self) -> list[ReadableSpan]:
        with self._lock:
            n = min(self.max_batch, len(self._queue))
            return [self._queue.popleft() for _ in range(n)]

    def _send(self, batch: list[ReadableSpan]) -> None:
        try:
            ok = self.exporter.export(batch) == SpanExportResult.SUCCESS
        except Exception:  # an exporter bug must not kill the worker
            log.exception("span export raised")
            ok = False
        if ok == self._failing:  # a change: say it once, not on every batch
            if ok:
                log.warning("OTLP span export works again")
            else:
                log.warning("OTLP span export failing: spans are dropped (counted) until it works")
        with self._lock:
            self._failing = not ok
            if ok:
                self.exported += len(batch)
            else:
                self.dropped += len(batch)

    def _work(self) -> None:
        while True:
            self._wake.wait(self.delay)
            self._wake.clear()
            while not (self._stop and self._failing) and (batch := self._take()):
                self._send(batch)
                if self._stop:
                    break
            if self._stop:
                return

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what is queued now (on the caller's thread)."""
        while batch := self._take():
            self._send(batch)
        return True

    def shutdown(self) -> None:
        """Stop: one last export attempt of at most one batch (none when the endpoint was
        failing, so a dead endpoint costs shutdown nothing); the rest is counted dropped."""
        with self._lock:
            self._stop = True
        self._wake.set()
        self._thread.join(timeout=10)
        with self._lock:
            self.dropped += len(self._queue)
            self._queue.clear()
        self.exporter.shutdown()


@dataclass(frozen=True)
class Endpoint:
    """Where OTLP goes, resolved from the config and the OTEL_EXPORTER_OTLP_* variables."""

    protocol: str
    """``http/protobuf`` or ``grpc``."""
    traces: str
    """Traces URL (http) or target (grpc)."""
    metrics: str
    """Metrics URL (http) or target (grpc)."""
    headers: dict[str, str]
    """Export headers (values are secrets: never logged)."""
    timeout: float

    def describe(self) -> str:
        """For logs: the protocol and URL, never the headers."""
        return f"{self.protocol} {self.traces or self.metrics}"


def parse_headers(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` (URL-encoded values) as in OTEL_EXPORTER_OTLP_HEADERS."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[unquote(key.strip())] = unquote(value.strip())
    return out


def resolve_endpoint(cfg: TelemetryConfig, env: Mapping[str, str] | None = None) -> Endpoint | None:
    """The configured OTLP endpoint, or None (then only the store exporter runs)."""
    env = os.environ if env is None else env
    protocol = (
        cfg.protocol
        or env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol not in ("http/protobuf", "grpc"):
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}: expected http/protobuf or grpc"
        )
    base = cfg.endpoint or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    traces = "" if cfg.endpoint else env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
    metrics = "" if cfg.endpoint else env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")
    if not (base or traces or metrics):
        return None
    if protocol == "grpc":
        traces = traces or base
        metrics = metrics or base
    else:
        root = base.rstrip("/")
        traces = traces or (root + "/v1/traces" if root else "")
        metrics = metrics or (root + "/v1/metrics" if root else "")
    headers = parse_headers(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""))
    for item in cfg.headers:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"config 'telemetry.headers' has {key!r}: expected key=value")
        headers[key.strip()] = value.strip()
    return Endpoint(protocol, traces, metrics, headers, cfg.timeout)


def span_exporter(ep: Endpoint) -> SpanExporter:
    """The SDK's OTLP span exporter for an endpoint."""
    if ep.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(
            endpoint=ep.traces,
            insecure=not ep.traces.startswith("https://"),
            headers=ep.headers,
            timeout=ep.timeout,
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=ep.traces, headers=ep.headers, timeout=ep.timeout)


def metric_exporter(ep: Endpoint) -> MetricExporter:
    """The SDK's OTLP metric exporter for an endpoint."""
    if ep.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter(
            endpoint=ep.metrics,
            insecure=not ep.metrics.startswith("https://"),
            headers=ep.headers,
            timeout=ep.timeout,
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=ep.metrics, headers=ep.headers, timeout=ep.timeout)


__all__ = [
    "BoundedSpanProcessor",
    "Endpoint",
    "StoreSpanExporter",
    "metric_exporter",
    "parse_headers",
    "resolve_endpoint",
    "span_exporter",
]
