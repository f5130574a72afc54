"""The server as the doctor sees it, and its requests as histograms.

No gauge here repeats what vLLM's own ``/metrics`` says (``vllm:num_requests_running``,
``vllm:kv_cache_usage_perc``, ``vllm:time_to_first_token_seconds``...): a fleet scrapes those
from vLLM. The doctor adds what only it knows: the supervisor's state, starts and exits, its
own ``/health`` probe's latency, and, when the server sends it its request spans
(``[tracing] capture_server``), one histogram observation per request under OpenTelemetry's
GenAI server metric names, with those conventions' bucket boundaries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import Meter

from ascend_doctor.core.events import ProcessEvent, ProcessState
from ascend_doctor.core.store_spans import SpanRecord
from ascend_doctor.metrics.observe import Kind, Point, observe

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Bucket bounds for the doctor's own durations (probes, collector runs)."""

# semantic-conventions docs/gen-ai/gen-ai-metrics.md (before the move to its own repository):
# the ExplicitBucketBoundaries each server metric SHOULD be specified with
REQUEST_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                            20.48, 40.96, 81.92)  # fmt: skip
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0)  # fmt: skip
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class ServerMetrics:
    """The supervised (or attached) server's state, lifecycle, probe and request latencies."""

    def __init__(self, meter: Meter) -> None:
        self._state: ProcessState | None = None
        observe(
            meter,
            "ascend_doctor.server.state",
            self._states,
            unit="1",
            description="The server's state as the doctor supervises it: 1 for the current "
            "state, 0 for the others",
            kind=Kind.UP_DOWN,
        )
        self.starts = meter.create_counter(
            "ascend_doctor.server.starts",
            unit="{start}",
            description="Server starts by the doctor, the first one included",
        )
        self.exits = meter.create_counter(
            "ascend_doctor.server.exits",
            unit="{exit}",
            description="Server exits the doctor did not ask for (crashed: true or false)",
        )
        self.probe = meter.create_histogram(
            "ascend_doctor.server.probe.duration",
            unit="s",
            description="The doctor's GET /health of the server (outcome: ok or failed)",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.request_duration = meter.create_histogram(
            "gen_ai.server.request.duration",
            unit="s",
            description="Request duration, from the server's request spans",
            explicit_bucket_boundaries_advisory=REQUEST_DURATION_BUCKETS,
        )
        self.ttft = meter.create_histogram(
            "gen_ai.server.time_to_first_token",
            unit="s",
            description="Time to first token, from the server's request spans",
            explicit_bucket_boundaries_advisory=TTFT_BUCKETS,
        )
        self.tpot = meter.create_histogram(
            "gen_ai.server.time_per_output_token",
            unit="s",
            description="Decode time per output token after the first, from the server's "
            "request spans",
            explicit_bucket_boundaries_advisory=TPOT_BUCKETS,
        )

    def _states(self) -> list[Point]:
        current = self._state
        if current is None:
            return []
        return [(1 if state == current else 0, {"state": state.value}) for state in ProcessState]

    def process_event(self, event: ProcessEvent) -> None:
        """A recorded change of the server's state."""
        self._state = event.state
        if event.state == ProcessState.STARTING:
            self.starts.add(1)
        elif event.state == ProcessState.EXITED:
            self.exits.add(1, {"crashed": "true" if event.crashed else "false"})

    def sample(self, data: dict[str, Any]) -> None:
        """A ``vllm`` collector sample: its /health probe."""
        latency = _num(data.get("health_latency_ms"))
        if latency is not None:
            ok = data.get("health_status") == 200
            self.probe.record(latency / 1000.0, {"outcome": "ok" if ok else "failed"})

    def request_spans(self, spans: Iterable[SpanRecord]) -> None:
        """The server's finished request spans (vLLM's ``llm_request``, with its
        ``gen_ai.latency.*`` attributes in seconds)."""
        for span in spans:
            if span.name != "llm_request":
                continue
            a = span.attributes
            # no gen_ai.operation.name: the span does not say whether it was a chat or a
            # completion, and a guessed value would split one server's requests wrongly
            attrs = {"gen_ai.provider.name": "vllm"}
            for key in ("gen_ai.request.model", "gen_ai.response.model"):
                if isinstance(a.get(key), str) and a[key]:
                    attrs[key] = a[key]
            if (e2e := _num(a.get("gen_ai.latency.e2e"))) is not None:
                self.request_duration.record(e2e, attrs)
            if (ttft := _num(a.get("gen_ai.latency.time_to_first_token"))) is not None:
                self.ttft.record(ttft, attrs)
            decode = _num(a.get("gen_ai.latency.time_in_model_decode"))
            tokens = _num(a.get("gen_ai.usage.completion_tokens"))
            if decode is not None and tokens is not None and tokens > 1:
                self.tpot.record(decode / (tokens - 1), attrs)


__all__ = ["SECONDS_BUCKETS", "ServerMetrics"]
