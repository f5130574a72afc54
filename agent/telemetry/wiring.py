"""``Telemetry``: the providers, the exporters, the listener and the servers, wired once."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from ascend_doctor import __version__
from ascend_doctor.agent.telemetry.export import (
    BoundedSpanProcessor,
    StoreSpanExporter,
    metric_exporter,
    resolve_endpoint,
    span_exporter,
)
from ascend_doctor.agent.telemetry.incident_traces import FixedIds, IncidentTracer
from ascend_doctor.agent.telemetry.lifecycle import LifecycleTracer
from ascend_doctor.agent.telemetry.receiver import Receiver, summary
from ascend_doctor.agent.telemetry.resource import build_resource
from ascend_doctor.core.config import Config
from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import (
    ActionResult,
    Finding,
    Incident,
    IncidentState,
    ProcessEvent,
    Sample,
)
from ascend_doctor.core.httpd import HttpServer, Request, Response, parse_address
from ascend_doctor.core.store import Store, StoreListener
from ascend_doctor.metrics.doctor import DoctorMetrics
from ascend_doctor.metrics.prom import prometheus_reader

log = logging.getLogger(__name__)


class Telemetry(StoreListener):
    """Everything OpenTelemetry in one daemon; register it in ``store.listeners``."""

    def __init__(
        self,
        config: Config,
        store: Store,
        *,
        log_path: Path | None = None,
        lines_read: Callable[[], int] = lambda: 0,
        npu_smi: str | None = None,
        server_name: str = "",
    ) -> None:
        tc, tr = config.telemetry, config.tracing
        self.server_name = server_name  # one of several servers: on every span and metric
        prom, recv = tc.prometheus_address, tr.receiver_address
        self.prometheus_at = parse_address(prom, "telemetry.prometheus_address")
        self.receiver_at = parse_address(recv, "tracing.receiver_address")
        self.config = config
        self.store = store
        self.endpoint = resolve_endpoint(tc)
        self.log_path = log_path
        self.lines_read = lines_read
        self.npu_smi = npu_smi
        self.receiver: Receiver | None = None
        self._prom: HttpServer | None = None
        self.prometheus_bound: tuple[str, int] | None = None
        self.otlp: BoundedSpanProcessor | None = None
        self.store_exporter = StoreSpanExporter(store)
        self._built = False

    def _build(self, devices: list[Sample] | None = None) -> None:
        """Providers, exporters and tracers, once: at ``start()`` (after the NPUs are known)
        or at the first record told before it."""
        if self._built:
            return
        self._built = True
        tc = self.config.telemetry
        self.resource = build_resource(self.store, devices or [], self.server_name)
        self.ids = FixedIds()
        self.tracer_provider = TracerProvider(
            resource=self.resource, id_generator=self.ids, shutdown_on_exit=False
        )
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.store_exporter))
        readers: list[MetricReader] = []
        # a signal without a URL (only OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or only ..._METRICS_
        # set) is not exported: the SDK exporters would default to localhost:4318, which is
        # the doctor's own receiver
        if self.endpoint is not None and self.endpoint.traces:
            self.otlp = BoundedSpanProcessor(
                span_exporter(self.endpoint),
                max_queue_size=tc.max_queue_size,
                max_batch=tc.max_export_batch_size,
                delay=tc.schedule_delay,
            )
            self.tracer_provider.add_span_processor(self.otlp)
        if self.endpoint is not None and self.endpoint.metrics:
            readers.append(
                PeriodicExportingMetricReader(
                    metric_exporter(self.endpoint),
                    export_interval_millis=tc.metrics_interval * 1000,
                    export_timeout_millis=tc.timeout * 1000,
                )
            )
        if self.endpoint is not None:
            log.info("telemetry: exporting over OTLP %s", self.endpoint.describe())
            # the SDK exporters log every retry of a dead endpoint on the terminal; the
            # processor says when export starts or stops working, and counts the drops
            logging.getLogger("opentelemetry.exporter.otlp").setLevel(logging.CRITICAL)
        self.prom_registry: Any = None
        if tc.prometheus:
            reader, self.prom_registry = prometheus_reader()
            readers.append(reader)
        self.meter_provider = MeterProvider(
            resource=self.resource, metric_readers=readers, shutdown_on_exit=False
        )
        self.metrics = DoctorMetrics(
            self.meter_provider,
            lines_read=self.lines_read,
            spans_dropped=self._dropped,
            budget_per_hour=self.config.remediation.budget_per_hour,
        )
        tracer = self.tracer_provider.get_tracer("ascend_doctor", __version__)
        self.incidents = IncidentTracer(
            tracer, self.ids, self.store, settle_seconds=self.config.remediation.settle_seconds
        )
        self.lifecycle = LifecycleTracer(tracer, self.log_path)
        logging.getLogger("ascend_doctor").addHandler(self.incidents.exceptions)

    async def _devices(self) -> list[Sample]:
        """One ``npu-smi info`` for the resource's ``hw.*`` when the store knows no NPU yet
        (a first start); a failure only means the resource goes without them."""
        if self.npu_smi is None or self.store.latest_samples("npu_smi"):
            return []
        from ascend_doctor.collectors.npu_smi import NpuSmiCollector

        timeout = min(self.config.collectors.npu_smi.timeout, 5.0)
        try:
            smi = NpuSmiCollector(self.npu_smi, timeout=timeout, board=False)
            return list(await smi.collect())
        except Exception as exc:  # no npu-smi, a hung one: telemetry goes on without hw.*
            log.info("telemetry: no NPU list for the resource: %s", exc)
            return []

    # -- counters ------------------------------------------------------------------------------

    def spans_dropped(self) -> int:
        """Spans lost on the way to the OTLP endpoint (queue full, export failed)."""
        return self.otlp.dropped if self.otlp is not None else 0

    def _dropped(self) -> dict[str, int]:
        out = {"doctor": self.spans_dropped()}
        if self.receiver is not None:
            out["server"] = self.receiver.forward_dropped
        return out

    def receiver_url(self) -> str | None:
        """Where the server sends its traces, once the receiver listens."""
        if self.receiver is None or self.receiver.address is None:
            return None
        host, port = self.receiver.address
        return f"http://{host}:{port}/v1/traces"

    # -- run -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the receiver and the scrape endpoint (in the running loop); a port that
        cannot be bound is logged and that part stays off: the daemon goes on."""
        self._build(await self._devices())
        self._seed()
        tr = self.config.tracing
        if tr.capture_server or tr.receiver:
            receiver = Receiver(
                self.store,
                max_body=tr.receiver_max_bytes,
                forward=self.endpoint if self.endpoint and self.endpoint.traces else None,
                metrics=self.metrics,
            )
            try:
                await receiver.start(*self.receiver_at)
                self.receiver = receiver
                log.info("telemetry: receiving server traces at %s", self.receiver_url())
            except OSError as exc:
                log.error("telemetry: OTLP receiver cannot listen on %s: %s", self.receiver_at, exc)
        if self.prom_registry is not None:
            prom = HttpServer(self._scrape, max_body=0, name="prometheus")
            try:
                self.prometheus_bound = await prom.start(*self.prometheus_at)
                self._prom = prom
                log.info("telemetry: Prometheus metrics at %s:%d", *self.prometheus_bound)
            except OSError as exc:
                log.error("telemetry: Prometheus cannot listen on %s: %s", self.prometheus_at, exc)

    def _seed(self) -> None:
        """What the metrics must know from before this run: the incidents that still need
        attention and the budget already used; a store that cannot say is logged."""
        try:
            for incident in self.store.incidents(
                states=(IncidentState.OPEN, IncidentState.MITIGATING, IncidentState.ESCALATED)
            ):
                self.metrics.incidents.track(incident)
        except Exception:  # metrics go on without the history
            log.exception("telemetry: reading open incidents failed")
        self._budget_changed()

    def _budget_changed(self) -> None:
        try:
            steps = [e.at for e in self.store.ledger().history]
        except Exception as exc:  # unreadable ledger: the policy fails closed and says so
            log.warning("telemetry: remediation ledger unreadable: %s", exc)
            return
        self.metrics.incidents.budget_used(steps)

    async def _scrape(self, req: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if req.path.split("?", 1)[0] not in ("/metrics", "/"):
            return Response(404, b"see /metrics\n")
        return Response(200, generate_latest(self.prom_registry), CONTENT_TYPE_LATEST)

    async def close(self) -> None:
        """End what is open, flush what can be flushed within the export timeout, stop.
        Call before the store is closed."""
        self._build()
        logging.getLogger("ascend_doctor").removeHandler(self.incidents.exceptions)
        if self.receiver is not None:
            await self.receiver.close()
        if self._prom is not None:
            await self._prom.close()
        for part in (self.incidents.close, self.lifecycle.close):
            try:
                part()
            except Exception:
                log.exception("telemetry: closing failed")
        timeout_ms = int(self.config.telemetry.timeout * 1000)
        if self.otlp is not None and self.otlp.failing:
            timeout_ms = min(timeout_ms, 200)  # the endpoint is down: do not wait for it
        try:
            self.meter_provider.shutdown(timeout_millis=timeout_ms)
        except Exception:
            log.exception("telemetry: metric shutdown failed")
        self.tracer_provider.shutdown()
        with contextlib.suppress(StoreError):  # a full disk must not fail the shutdown
            self.store.set_meta("telemetry", self.counters())

    def counters(self) -> dict[str, Any]:
        """What telemetry did (kept in the store's meta at shutdown)."""
        out: dict[str, Any] = {
            "endpoint": self.endpoint.describe() if self.endpoint else "",
            "spans_dropped": self.spans_dropped(),
            "spans_exported": self.otlp.exported if self.otlp else 0,
            "store_failures": self.store_exporter.failures,
        }
        if self.receiver is not None:
            out["receiver"] = summary(self.receiver)
        return out

    # -- hooks ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def incident_context(self, incident_id: int) -> Iterator[None]:
        """Work on an incident inside its trace (log lines carry its ids)."""
        self._build()
        with self.incidents.context(incident_id):
            yield

    def drained(self) -> None:
        """The tailer read every source to its end."""
        self._build()
        self.metrics.drained()

    def collector_run(self, name: str, seconds: float, ok: bool) -> None:
        """A collector run finished."""
        self._build()
        self.metrics.collector_run(name, seconds, ok)

    # -- StoreListener -------------------------------------------------------------------------

    def incident_changed(self, before: Incident | None, after: Incident) -> None:
        """An incident opened or changed."""
        self._build()
        self.metrics.incident(before, after)
        self.incidents.incident_changed(before, after)

    def finding_added(self, finding: Finding, incident_id: int | None) -> None:
        """A finding was stored."""
        self._build()
        self.metrics.finding(finding)
        self.incidents.finding_added(finding, incident_id)

    def action_added(self, incident_id: int, result: ActionResult) -> None:
        """A remediation decision was stored."""
        self._build()
        self.metrics.action(result)
        self._budget_changed()
        self.incidents.action_added(incident_id, result)

    def process_event(self, event: ProcessEvent) -> None:
        """The supervisor changed state."""
        self._build()
        self.metrics.process_event(event)
        self.lifecycle.process_event(event)

    def sample_added(self, collector: str, subject: str, at: float, data: dict[str, Any]) -> None:
        """A sample was stored."""
        self._build()
        self.metrics.sample(collector, subject, data)


__all__ = ["Telemetry"]
