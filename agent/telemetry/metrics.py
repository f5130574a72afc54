"""Metrics: every NPU, the server, and the doctor itself.

Device and server gauges are set from the collectors' samples as the store records them
(``sample_added``); the doctor's own counters from its recorded findings and decisions and
from a few hooks the daemon calls. Names follow the issue: ``npu.*`` per device with the
``hw.*`` attributes, ``vllm.*`` for the server, ``doctor.*`` for the doctor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider

from ascend_doctor.agent.telemetry.resource import device_attributes
from ascend_doctor.core.events import ActionResult, Finding, Incident, IncidentState

MIB = 1024 * 1024


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class DoctorMetrics:
    """The instruments, and how samples and records feed them."""

    def __init__(
        self,
        provider: MeterProvider,
        *,
        lines_read: Callable[[], int] = lambda: 0,
        spans_dropped: Callable[[], dict[str, int]] = dict,
    ) -> None:
        m = provider.get_meter("ascend_doctor")
        self._lines_read = lines_read
        self._spans_dropped = spans_dropped
        self._drained_at = time.monotonic()
        # devices
        self.hbm_used = m.create_gauge("npu.hbm.used", unit="By", description="HBM in use")
        self.hbm_limit = m.create_gauge("npu.hbm.limit", unit="By", description="HBM size")
        self.aicore = m.create_gauge(
            "npu.aicore.utilization", unit="1", description="AI Core utilisation (0..1)"
        )
        self.temperature = m.create_gauge("npu.temperature", unit="Cel", description="Chip temp")
        self.power = m.create_gauge("npu.power", unit="W", description="Chip power draw")
        self.health = m.create_gauge(
            "npu.health", unit="1", description="1 when npu-smi says OK, else 0"
        )
        # the server
        self.running = m.create_gauge("vllm.num_requests.running", unit="{request}")
        self.waiting = m.create_gauge("vllm.num_requests.waiting", unit="{request}")
        self.kv_usage = m.create_gauge("vllm.kv_cache.usage", unit="1")
        self.preemptions = m.create_counter("vllm.preemptions", unit="{preemption}")
        self.ttft_p99 = m.create_gauge("vllm.time_to_first_token.p99", unit="s")
        self.server_health = m.create_gauge("vllm.health", unit="1")
        # the doctor
        m.create_observable_counter(
            "doctor.log.lines", [self._observe_lines], unit="{line}", description="Lines read"
        )
        self.findings = m.create_counter("doctor.findings", unit="{finding}")
        self.remediations = m.create_counter("doctor.remediations", unit="{decision}")
        m.create_observable_gauge(
            "doctor.tail.lag",
            [self._observe_lag],
            unit="s",
            description="Seconds since the tailer last read every file to its end",
        )
        # MTTR and time between incidents, per category
        self.repair_time = m.create_histogram("doctor.incident.repair_time", unit="s")
        self.incident_gap = m.create_histogram("doctor.incident.interval", unit="s")
        self._opened: dict[str, float] = {}
        self.collector_duration = m.create_histogram("doctor.collector.duration", unit="s")
        self.collector_failures = m.create_counter("doctor.collector.failures", unit="{failure}")
        m.create_observable_counter("doctor.spans.dropped", [self._observe_dropped], unit="{span}")
        self.received_spans = m.create_counter("doctor.receiver.spans", unit="{span}")
        self.rejected = m.create_counter("doctor.receiver.rejected", unit="{request}")

    # -- callbacks (run by the metric reader) --------------------------------------------------

    def _observe_lines(self, options: CallbackOptions) -> Iterable[Observation]:
        yield Observation(self._lines_read())

    def _observe_dropped(self, options: CallbackOptions) -> Iterable[Observation]:
        for pipeline, count in self._spans_dropped().items():
            yield Observation(count, {"pipeline": pipeline})

    def _observe_lag(self, options: CallbackOptions) -> Iterable[Observation]:
        yield Observation(round(time.monotonic() - self._drained_at, 3))

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
        """A stored sample: devices and the server become gauges."""
        if collector == "npu_smi":
            self._device(subject, data)
        elif collector == "vllm":
            self._server(data)

    def _device(self, subject: str, data: dict[str, Any]) -> None:
        attrs = device_attributes(subject, data)
        health = str(data.get("health") or "")
        if (v := _num(data.get("hbm_used_mb"))) is not None:
            self.hbm_used.set(v * MIB, attrs)
        if (v := _num(data.get("hbm_total_mb"))) is not None:
            self.hbm_limit.set(v * MIB, attrs)
        if (v := _num(data.get("aicore_pct"))) is not None:
            self.aicore.set(v / 100.0, attrs)
        if (v := _num(data.get("temp_c"))) is not None:
            self.temperature.set(v, attrs)
        if (v := _num(data.get("power_w"))) is not None:
            self.power.set(v, attrs)
        if health:
            # no hw.state attribute: a gauge keeps every series, and a stale "OK" series
            # would go on saying 1 after the device went bad
            self.health.set(1 if health == "OK" else 0, attrs)

    def _server(self, data: dict[str, Any]) -> None:
        if (v := _num(data.get("health_status"))) is not None:
            self.server_health.set(1 if v == 200 else 0)
        for key, gauge in (
            ("running", self.running),
            ("waiting", self.waiting),
            ("kv_cache_usage", self.kv_usage),
            ("ttft_p99", self.ttft_p99),
        ):
            if (v := _num(data.get(key))) is not None:
                gauge.set(v)
        if (v := _num(data.get("preemptions_delta"))) is not None and v > 0:
            self.preemptions.add(v)

    def finding(self, finding: Finding) -> None:
        """A stored finding."""
        self.findings.add(1, {"category": finding.category.value, "rule": finding.rule})

    def incident(self, before: Incident | None, after: Incident) -> None:
        """An incident opened (seconds since the last of its category) or was resolved."""
        cat = {"category": after.category.value}
        if before is None and (last := self._opened.get(cat["category"])) is not None:
            self.incident_gap.record(after.opened_at - last, cat)
        self._opened[cat["category"]] = max(after.opened_at, self._opened.get(cat["category"], 0))
        if after.state == IncidentState.RESOLVED and before and before.state != after.state:
            self.repair_time.record((after.resolved_at or after.opened_at) - after.opened_at, cat)

    def action(self, result: ActionResult) -> None:
        """A stored remediation decision."""
        self.remediations.add(1, {"action": result.name, "outcome": result.outcome.value})


__all__ = ["DoctorMetrics"]
