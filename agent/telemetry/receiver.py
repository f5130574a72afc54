"""The OTLP/HTTP trace receiver: the server's own request spans (vLLM started with
``--otlp-traces-endpoint``) stored beside the incidents and forwarded when there is an
OTLP endpoint.

It listens on loopback in the daemon's loop. ``POST /v1/traces`` with a protobuf or JSON
``ExportTraceServiceRequest``; a body over the size limit, truncated, or not a valid
request is answered 400 and counted by reason. The store bounds the kept spans; the
forwarding queue is bounded too and counts what it drops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ascend_doctor.agent.telemetry.export import Endpoint
from ascend_doctor.agent.telemetry.ratelimit import ClientLimits
from ascend_doctor.collectors.otlp import from_otlp_json, from_otlp_proto
from ascend_doctor.collectors.otlp_records import to_otlp_proto
from ascend_doctor.core.errors import TelemetryError
from ascend_doctor.core.httpd import HttpServer, Request, Response
from ascend_doctor.core.store import SpanRecord, Store
from ascend_doctor.metrics.doctor import DoctorMetrics

log = logging.getLogger(__name__)

FORWARD_QUEUE = 10_000  # spans waiting to be forwarded; beyond it they are dropped, counted
FORWARD_BATCH = 512
SPANS_PER_SECOND = 2000.0
"""Spans accepted per second from one client (a burst of one second's worth); more are
answered 429 (``ratelimit.py`` says what a client is)."""
Send = Callable[[ExportTraceServiceRequest], Awaitable[None]]


class Receiver:
    """Receives OTLP/HTTP traces; ``start()`` then ``close()``."""

    def __init__(
        self,
        store: Store,
        *,
        max_body: int,
        forward: Endpoint | None = None,
        metrics: DoctorMetrics | None = None,
    ) -> None:
        self.store = store
        self.forward_to = forward
        self.metrics = metrics
        self.accepted = 0
        """Spans received and stored."""
        self.rejected: Counter[str] = Counter()
        """Rejected requests by reason (oversized, truncated, malformed, ...)."""
        self.forwarded = 0
        self.forward_dropped = 0
        self.address: tuple[str, int] | None = None
        self._http = HttpServer(
            self._handle, max_body=max_body, on_reject=self._reject, name="otlp receiver"
        )
        self.limits = ClientLimits(SPANS_PER_SECOND)
        self._queue: deque[SpanRecord] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen (a failure to bind raises OSError for the caller to log)."""
        self.address = await self._http.start(host, port)
        if self.forward_to is not None:
            self._task = asyncio.create_task(self._forward_loop(), name="otlp-forward")
        return self.address

    async def close(self) -> None:
        """Stop listening; one last forward attempt; the rest is counted dropped."""
        await self._http.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.forward_dropped += len(self._queue)
        self._queue.clear()

    def _reject(self, reason: str, client: str = "") -> None:
        self.rejected[reason] += 1
        if self.metrics is not None:
            self.metrics.rejected.add(1, {"reason": reason})
        log.warning(
            "otlp receiver: rejected a request (%s)%s", reason, client and f" from {client}"
        )

    async def _handle(self, req: Request) -> Response:
        path = req.path.split("?", 1)[0]
        if path != "/v1/traces":
            self._reject("not_found")
            return Response(404, b"only /v1/traces is served here\n")
        if req.method != "POST":
            self._reject("method")
            return Response(405, b"POST only\n", headers={"Allow": "POST"})
        ctype = req.headers.get("content-type", "").split(";")[0].strip().lower()
        try:
            if ctype == "application/json":
                spans = from_otlp_json(req.body)
            elif ctype in ("application/x-protobuf", "application/protobuf"):
                spans = from_otlp_proto(req.body)
            else:
                self._reject("content_type")
                return Response(415, b"expected application/x-protobuf or application/json\n")
        except TelemetryError as exc:
            self._reject("malformed")
            return Response(400, f"{exc}\n".encode())
        noisy = self.limits.admit(req.peer, spans)
        if noisy is not None:  # that client only: the others' buckets are their own
            self._reject("rate_limited", noisy)
            return Response(429, b"too many spans; retry later\n", headers={"Retry-After": "1"})
        if spans:
            self.store.add_spans(spans)
            self.accepted += len(spans)
            if self.metrics is not None:
                self.metrics.received_spans.add(len(spans))
                self.metrics.request_spans(spans)
            self._enqueue(spans)
        if ctype == "application/json":
            return Response(200, b"{}", "application/json")
        body = ExportTraceServiceResponse().SerializeToString()
        return Response(200, body, "application/x-protobuf")

    def _enqueue(self, spans: Sequence[SpanRecord]) -> None:
        if self.forward_to is None:
            return
        room = FORWARD_QUEUE - len(self._queue)
        self._queue.extend(spans[: max(0, room)])
        self.forward_dropped += max(0, len(spans) - max(0, room))
        self._wake.set()

    async def _forward_loop(self) -> None:
        ep = self.forward_to
        assert ep is not None
        async with contextlib.AsyncExitStack() as stack:
            send = await self._sender(ep, stack)
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    n = min(FORWARD_BATCH, len(self._queue))
                    batch = [self._queue.popleft() for _ in range(n)]
                    try:
                        await send(to_otlp_proto(batch))
                        self.forwarded += n
                    except Exception as exc:  # the endpoint's trouble is counted, not raised
                        self.forward_dropped += n
                        log.warning("forwarding %d server spans failed: %s", n, exc)

    async def _sender(self, ep: Endpoint, stack: contextlib.AsyncExitStack) -> Send:
        if ep.protocol == "grpc":
            import grpc
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
                TraceServiceStub,
            )

            target = ep.traces.split("://", 1)[-1]
            if ep.traces.startswith("https://"):
                channel = grpc.aio.secure_channel(target, grpc.ssl_channel_credentials())
            else:
                channel = grpc.aio.insecure_channel(target)
            stack.push_async_callback(channel.close)
            stub = TraceServiceStub(channel)  # type: ignore[no-untyped-call]
            metadata = [(k.lower(), v) for k, v in ep.headers.items()]

            async def send_grpc(req: ExportTraceServiceRequest) -> None:
                await stub.Export(req, timeout=ep.timeout, metadata=metadata)

            return send_grpc
        client = await stack.enter_async_context(
            httpx.AsyncClient(timeout=ep.timeout, trust_env=False)
        )
        headers = {**ep.headers, "Content-Type": "application/x-protobuf"}

        async def send_http(req: ExportTraceServiceRequest) -> None:
            resp = await client.post(ep.traces, content=req.SerializeToString(), headers=headers)
            if resp.status_code >= 300:
                raise TelemetryError(f"HTTP {resp.status_code}")

        return send_http


def summary(receiver: Receiver) -> dict[str, object]:
    """The receiver's counters (kept in the store's meta for ``status``)."""
    return {
        "address": "{}:{}".format(*receiver.address) if receiver.address else "",
        "accepted": receiver.accepted,
        "rejected": dict(receiver.rejected),
        "forwarded": receiver.forwarded,
        "forward_dropped": receiver.forward_dropped,
    }


__all__ = ["Receiver", "summary"]
