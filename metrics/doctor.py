"""Metrics: every NPU, the server as the doctor sees it, the incidents, the doctor itself.

One name per metric everywhere (docs/telemetry.md has the table): the doctor's own under
``ascend_doctor.*`` (``ascend_doctor_*`` in Prometheus), the devices in OpenTelemetry's
hardware conventions (``devices.py``), the server and its requests in
``server.py``, the incidents and the budget in ``incidents.py``. Things that
happen are counters (``_total``), never only a last value; durations are histograms.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider

from ascend_doctor.core.events import ActionResult, Finding, Incident, ProcessEvent
from ascend_doctor.core.store_spans import SpanRecord
from ascend_doctor.metrics.devices import DeviceMetrics
from ascend_doctor.metrics.incidents import IncidentMetrics
from ascend_doctor.metrics.observe import Kind, observe, one
from ascend_doctor.metrics.server import SECONDS_BUCKETS, ServerMetrics

METER = "ascend_doctor"
"""The instrumentation scope of every instrument here."""


class DoctorMetrics:
    """The instruments, and how samples and records feed them."""

    def __init__(
        self,
        provider: MeterProvider,
        *,
        lines_read: Callable[[], int] = lambda: 0,
        spans_dropped: Callable[[], dict[str, int]] = dict,
        budget_per_hour: int = 6,
    ) -> None:
        m = provider.get_meter(METER)
        self._lines_read = lines_read
        self._spans_dropped = spans_dropped
        self._drained_at = time.monotonic()
        self.devices = DeviceMetrics(m)
        self.server = ServerMetrics(m)
        self.incidents = IncidentMetrics(m, budget_per_hour=budget_per_hour)
        observe(
            m,
            "ascend_doctor.log.lines",
            lambda: one(self._lines_read()),
            unit="{line}",
            description="Log lines read",
            kind=Kind.COUNTER,
        )
        self.findings = m.create_counter(
            "ascend_doctor.findings", unit="{finding}", description="Findings recorded"
        )
        self.remediations = m.create_counter(
            "ascend_doctor.remediations",
            unit="{decision}",
            description="Remediation decisions, taken or not, by action and outcome",
        )
        observe(
            m,
            "ascend_doctor.tail.lag",
            lambda: one(round(time.monotonic() - self._drained_at, 3)),
            unit="s",
            description="Seconds since the tailer last read every file to its end",
        )
        self.collector_duration = m.create_histogram(
            "ascend_doctor.collector.duration",
            unit="s",
            description="Collector run time",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.collector_failures = m.create_counter(
            "ascend_doctor.collector.failures",
            unit="{failure}",
            description="Failed collector runs",
        )
        observe(
            m,
            "ascend_doctor.spans.dropped",
            lambda: [(n, {"pipeline": p}) for p, n in self._spans_dropped().items()],
            unit="{span}",
            description="Spans lost on the way to the OTLP endpoint, by pipeline",
            kind=Kind.COUNTER,
        )
        self.received_spans = m.create_counter(
            "ascend_doctor.receiver.spans",
            unit="{span}",
            description="Server request spans received",
        )
        self.rejected = m.create_counter(
            "ascend_doctor.receiver.rejected",
            unit="{request}",
            description="Receiver requests rejected, by reason",
        )

    # -- feeds ---------------------------------------------------------------------------------

    def drained(self) -> None:
        """The tailer just read every source to its end."""
        self._drained_at = time.monotonic()

    def collector_run(self, name: str, seconds: float, ok: bool) -> None:
        """One collector run finished."""
        self.collector_duration.record(seconds, {"collector": name})
        if not ok:
            self.collector_failures.add(1, {"collector": name})

    def sample(self, collector: str, subject: str, data: dict[str, Any]) -> None:
        """A stored sample: npu-smi's feed the devices, vLLM's the server's probe."""
        if collector == "npu_smi":
            self.devices.sample(subject, data)
        elif collector == "vllm":
            self.server.sample(data)

    def finding(self, finding: Finding) -> None:
        """A stored finding."""
        self.findings.add(1, {"category": finding.category.value, "rule": finding.rule})
        self.devices.finding(finding)

    def action(self, result: ActionResult) -> None:
        """A stored remediation decision."""
        self.remediations.add(1, {"action": result.name, "outcome": result.outcome.value})

    def incident(self, before: Incident | None, after: Incident) -> None:
        """A stored change of an incident."""
        self.incidents.changed(before, after)

    def process_event(self, event: ProcessEvent) -> None:
        """A stored change of the server's state."""
        self.server.process_event(event)

    def request_spans(self, spans: Iterable[SpanRecord]) -> None:
        """The server's request spans, as the receiver accepted them."""
        self.server.request_spans(spans)


__all__ = ["METER", "DoctorMetrics"]
