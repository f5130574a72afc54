"""The fake server's request traces: with ``--otlp-traces-endpoint`` vLLM exports one
``llm_request`` span (kind SERVER) per finished request, with the ``gen_ai.*`` attributes of
``vllm.tracing.SpanAttributes``. Sent here as OTLP/HTTP protobuf (what vLLM sends with
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``), batched in a background thread like
the SDK's BatchSpanProcessor: a request never waits for it, a failed export is dropped.
"""

from __future__ import annotations

import os
import queue
import secrets
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2

SPAN_NAME = "llm_request"


@dataclass(frozen=True)
class RequestTiming:
    """What vLLM measures of one finished request (wall-clock seconds)."""

    request_id: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int
    temperature: float
    top_p: float
    n: int
    arrival: float
    scheduled: float
    first_token: float
    finished: float
    traceparent: str = ""
    """The caller's W3C traceparent header; vLLM continues that trace."""


def _kv(key: str, value: str | int | float) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=value))


def _parent(traceparent: str) -> tuple[bytes, bytes]:
    parts = traceparent.strip().split("-")
    if len(parts) == 4 and len(parts[1]) == 32 and len(parts[2]) == 16:
        try:
            return bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
        except ValueError:
            pass
    return secrets.token_bytes(16), b""


def request_span(t: RequestTiming) -> trace_pb2.Span:
    """The ``llm_request`` span vLLM exports for one request."""
    trace_id, parent = _parent(t.traceparent)
    span = trace_pb2.Span(
        trace_id=trace_id,
        span_id=secrets.token_bytes(8),
        parent_span_id=parent,
        name=SPAN_NAME,
        kind=trace_pb2.Span.SPAN_KIND_SERVER,
        start_time_unix_nano=int(t.arrival * 1e9),
        end_time_unix_nano=int(t.finished * 1e9),
    )
    span.attributes.extend(
        [
            _kv("gen_ai.response.model", t.model),
            _kv("gen_ai.request.id", t.request_id),
            _kv("gen_ai.request.temperature", t.temperature),
            _kv("gen_ai.request.top_p", t.top_p),
            _kv("gen_ai.request.max_tokens", t.max_tokens),
            _kv("gen_ai.request.n", t.n),
            _kv("gen_ai.usage.num_sequences", t.n),
            _kv("gen_ai.usage.prompt_tokens", t.prompt_tokens),
            _kv("gen_ai.usage.completion_tokens", t.completion_tokens),
            _kv("gen_ai.latency.time_in_queue", t.scheduled - t.arrival),
            _kv("gen_ai.latency.time_to_first_token", t.first_token - t.arrival),
            _kv("gen_ai.latency.e2e", t.finished - t.arrival),
            _kv("gen_ai.latency.time_in_model_prefill", t.first_token - t.scheduled),
            _kv("gen_ai.latency.time_in_model_decode", t.finished - t.first_token),
            _kv("gen_ai.latency.time_in_model_inference", t.finished - t.scheduled),
        ]
    )
    return span


class SpanSender:
    """Batches request spans to an OTLP/HTTP endpoint from a daemon thread."""

    def __init__(self, endpoint: str, *, service_name: str = "", timeout: float = 2.0) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.service_name = service_name or os.environ.get("OTEL_SERVICE_NAME", "vllm")
        self.sent = 0
        self.failed = 0
        self._queue: queue.Queue[trace_pb2.Span] = queue.Queue(maxsize=2048)
        self._thread = threading.Thread(target=self._run, daemon=True, name="otlp")
        self._thread.start()

    def add(self, timing: RequestTiming) -> None:
        """Queue one finished request's span (dropped when the queue is full)."""
        try:
            self._queue.put_nowait(request_span(timing))
        except queue.Full:
            self.failed += 1

    def _request(self, spans: list[trace_pb2.Span]) -> ExportTraceServiceRequest:
        req = ExportTraceServiceRequest()
        rs = req.resource_spans.add()
        rs.resource.attributes.extend(
            [_kv("service.name", self.service_name), _kv("process.pid", os.getpid())]
        )
        ss = rs.scope_spans.add()
        ss.scope.name = "vllm.llm_engine"
        ss.spans.extend(spans)
        return req

    def _post(self, spans: list[trace_pb2.Span]) -> None:
        body = self._request(spans).SerializeToString()
        req = urllib.request.Request(
            self.endpoint,
            data=body,
            method="POST",
            headers={"Content-Type": "application/x-protobuf"},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=self.timeout) as resp:
                resp.read()
            self.sent += len(spans)
        except (urllib.error.URLError, OSError):
            self.failed += len(spans)

    def _run(self) -> None:
        while True:
            spans = [self._queue.get()]
            deadline = time.monotonic() + 0.2
            while len(spans) < 64:
                try:
                    spans.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            self._post(spans)


__all__ = ["RequestTiming", "SpanSender", "request_span"]
