"""A test OTLP collector: a loopback HTTP server that decodes OTLP/HTTP protobuf traces and
metrics with opentelemetry-proto and keeps what it received."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


def attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs}


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int
    events: list[dict[str, Any]]


@dataclass
class Collector:
    traces: list[ExportTraceServiceRequest] = field(default_factory=list)
    metrics: list[ExportMetricsServiceRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> list[Span]:
        out = []
        with self.lock:
            reqs = list(self.traces)
        for req in reqs:
            for rs in req.resource_spans:
                res = attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        out.append(
                            Span(
                                sp.trace_id.hex(),
                                sp.span_id.hex(),
                                sp.parent_span_id.hex(),
                                sp.name,
                                attrs(sp.attributes),
                                res,
                                sp.status.code,
                                [
                                    {"name": e.name, "attributes": attrs(e.attributes)}
                                    for e in sp.events
                                ],
                            )
                        )
        return out

    def points(self, name: str) -> Iterator[tuple[dict[str, Any], float]]:
        """(attributes, value) of every received data point of a metric."""
        with self.lock:
            reqs = list(self.metrics)
        for req in reqs:
            for rm in req.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if m.name != name:
                            continue
                        kind = m.WhichOneof("data")
                        for p in getattr(m, kind).data_points:
                            num = p.as_double if p.HasField("as_double") else p.as_int
                            yield attrs(p.attributes), float(num)


def start_collector() -> tuple[Collector, ThreadingHTTPServer]:
    col = Collector()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/v1/traces":
                with col.lock:
                    col.traces.append(ExportTraceServiceRequest.FromString(body))
                out = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                with col.lock:
                    col.metrics.append(ExportMetricsServiceRequest.FromString(body))
                out = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    col.port = server.server_address[1]
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return col, server


__all__ = ["Collector", "KeyValue", "Span", "start_collector"]
