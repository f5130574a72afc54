"""OTLP over gRPC: the doctor's spans and metrics reach a real gRPC collector on loopback,
and importing the daemon still loads neither Textual nor gRPC."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from ascend_doctor.agent.telemetry import Telemetry
from ascend_doctor.core.config import Config, TelemetryConfig
from ascend_doctor.core.events import IncidentState
from ascend_doctor.core.store import Store
from tests.unit.test_telemetry import finding


class Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.names: list[str] = []
        self.lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self.lock:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    self.names.extend(sp.name for sp in ss.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.names: set[str] = set()

    def Export(self, request: Any, context: Any) -> Any:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                self.names.update(m.name for m in sm.metrics)
        return metrics_service_pb2.ExportMetricsServiceResponse()


async def test_spans_and_metrics_over_grpc(tmp_path: Path) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    traces, metrics = Traces(), Metrics()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(traces, server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(metrics, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        store = Store.in_dir(tmp_path)
        tc = TelemetryConfig(endpoint=f"127.0.0.1:{port}", protocol="grpc", timeout=5.0)
        t = Telemetry(Config(telemetry=tc), store)
        store.listeners.append(t)
        inc = store.open_incident(finding())
        store.add_finding(finding(), inc.id)
        store.update_incident(inc.id, state=IncidentState.RESOLVED, resolved_at=finding().at + 5)
        await t.close()  # flushes spans and the last metrics
        store.close()
    finally:
        server.stop(None)
    assert sorted(traces.names) == ["detect", "incident npu_oom", "verify"]
    assert "ascend_doctor.findings" in metrics.names


def test_importing_the_daemon_loads_neither_textual_nor_grpc() -> None:
    code = (
        "import sys, ascend_doctor.agent.daemon\n"
        "bad = [m for m in ('textual', 'grpc') if m in sys.modules]\n"
        "sys.exit(f'loaded: {bad}' if bad else 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr


async def test_receiver_forwards_server_spans_over_grpc(tmp_path: Path) -> None:
    import asyncio

    from ascend_doctor.agent.telemetry.export import Endpoint
    from ascend_doctor.agent.telemetry.receiver import Receiver
    from ascend_doctor.agent.telemetry.span_codec import to_otlp_proto
    from tests.conftest import wait_for
    from tests.unit.test_telemetry import sample_records

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    traces = Traces()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(traces, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    store = Store.in_dir(tmp_path)
    ep = Endpoint("grpc", f"127.0.0.1:{port}", f"127.0.0.1:{port}", {"x-token": "s"}, 5.0)
    receiver = Receiver(store, max_body=1 << 20, forward=ep)
    try:
        _, rport = await receiver.start("127.0.0.1", 0)
        body = to_otlp_proto(sample_records()).SerializeToString()
        reader, writer = await asyncio.open_connection("127.0.0.1", rport)
        writer.write(
            b"POST /v1/traces HTTP/1.1\r\nContent-Type: application/x-protobuf\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        assert (await reader.read()).startswith(b"HTTP/1.1 200 ")
        writer.close()
        # the collector may hold the span before the export call returns and is counted
        await wait_for(
            lambda: traces.names == ["llm_request"] and receiver.forwarded == 1,
            10,
            "the span forwarded and counted",
        )
    finally:
        await receiver.close()
        store.close()
        server.stop(None)
