"""The ``vllm`` collector: /health (status, latency), /metrics and /v1/models.

From /metrics also the API server's resident memory (the process collector's
``process_resident_memory_bytes``) and its trend beside npu-smi's HBM and the process tree's
RSS (``api_rss_growth_mb_per_h``, ``api_rss_oom_eta_s``).

``parse_metrics`` is pure and reads both the v1 metric names and the older ones
(``vllm:gpu_cache_usage_perc``); counters and histograms are summed over label
sets (engines, models). Latency quantiles are computed over the interval from
the histogram buckets' deltas, so they describe the last interval, not all time.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from ascend_doctor.collectors.base import CollectorSpec, Tally
from ascend_doctor.collectors.trend import Trend
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.events import Sample

log = logging.getLogger(__name__)

COLLECTOR = "vllm"

GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",  # before v1
}
COUNTERS = {
    "vllm:num_preemptions_total": "preemptions_total",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
}
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "ttft",
    "vllm:e2e_request_latency_seconds": "e2e",
    "vllm:inter_token_latency_seconds": "itl",
    "vllm:time_per_output_token_seconds": "itl",  # its name before vLLM v1
}
PROCESS = {
    "process_resident_memory_bytes": "api_rss_bytes",
    "process_start_time_seconds": "api_started_at",
}
"""The only memory gauge a released vLLM's /metrics has: prometheus_client's process
collector, about the API server process alone, and only with one API server (with
``--api-server-count`` > 1 vLLM sets ``PROMETHEUS_MULTIPROC_DIR`` and the multiprocess registry
has no process metrics: ``vllm/v1/metrics/prometheus.py`` ``get_prometheus_registry``). No
``vllm:`` gauge is memory in 0.11-0.23 (``vllm:kv_cache_usage_perc`` is the share of KV blocks
in use), and vLLM-Ascend's ``engine:memory:*`` is set once at warm-up on its main branch only
(docs/healthy-looking.md)."""
BASELINED = ("ttft_p99", "itl_p99")
"""Latencies compared with their own baseline (``<name>_ratio``, ``latency_p99_ratio``)."""


@dataclass(frozen=True)
class VllmMetrics:
    """What /metrics says, summed over label sets."""

    values: dict[str, float]
    """Gauges and counters by short name (running, waiting, kv_cache_usage, ...)."""
    buckets: dict[str, dict[float, float]]
    """Cumulative histogram buckets by short name: upper bound -> count."""
    cache_config: dict[str, str] = field(default_factory=dict)
    """Labels of ``vllm:cache_config_info`` (block_size, gpu_memory_utilization, ...)."""


def parse_metrics(text: str) -> VllmMetrics:
    """Parse Prometheus text from vLLM's /metrics; CollectorError on text that is not."""
    values: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    cache: dict[str, str] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in GAUGES or s.name in COUNTERS or s.name in PROCESS:
                    key = GAUGES.get(s.name) or COUNTERS.get(s.name) or PROCESS[s.name]
                    values[key] = values.get(key, 0.0) + float(s.value)
                elif s.name.endswith("_bucket") and s.name[: -len("_bucket")] in HISTOGRAMS:
                    key = HISTOGRAMS[s.name[: -len("_bucket")]]
                    le = float(s.labels.get("le", "inf"))
                    hist = buckets.setdefault(key, {})
                    hist[le] = hist.get(le, 0.0) + float(s.value)
                elif s.name == "vllm:cache_config_info":
                    cache = {k: v for k, v in s.labels.items() if k not in ("engine", "model_name")}
    except (ValueError, TypeError, IndexError) as exc:
        raise CollectorError(f"vllm /metrics: not Prometheus text: {exc}") from None
    return VllmMetrics(values, buckets, cache)


def quantile(buckets: dict[float, float], q: float) -> float | None:
    """The q-quantile of a cumulative histogram by linear interpolation (None: no data)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    total = buckets[bounds[-1]]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            span = count - prev_count
            frac = (rank - prev_count) / span if span > 0 else 1.0
            return prev_bound + (bound - prev_bound) * frac
        prev_bound, prev_count = bound, count
    return prev_bound


class LatencyBaseline:
    """Each latency p99's baseline, learned over the first ``window`` seconds of healthy
    serving with requests flowing; afterwards it turns p99s into ratios to it.

    The baseline is the median of the interval p99s seen in the window, so one slow interval
    while it is learned does not set it. Samples without requests flowing neither teach it
    nor get a ratio: an idle server has no latency worth comparing.
    """

    def __init__(self, window: float) -> None:
        self.window = window
        self.started: float | None = None
        """Time of the first sample with requests flowing."""
        self.seen: dict[str, list[float]] = {k: [] for k in BASELINED}
        self.base: dict[str, float] | None = None
        """p99 baselines by field, once learned."""

    def update(self, at: float, values: dict[str, Any]) -> dict[str, float]:
        """Learn from or compare one sample's values; the fields to add to it."""
        served = values.get("user_tokens_delta", values.get("generation_tokens_delta"))
        flowing = values.get("health_status") == 200 and (served or 0) > 0
        if not flowing:
            return {}
        if self.base is None:
            self.started = at if self.started is None else self.started
            for key in BASELINED:
                if isinstance(values.get(key), int | float) and values[key] > 0:
                    self.seen[key].append(float(values[key]))
            if at - self.started >= self.window and any(self.seen.values()):
                self.base = {k: statistics.median(v) for k, v in self.seen.items() if v}
            return {}
        out = {
            f"{key}_ratio": round(float(values[key]) / base, 2)
            for key, base in self.base.items()
            if isinstance(values.get(key), int | float) and base > 0
        }
        out.update({f"{key}_baseline": base for key, base in self.base.items()})
        ratios = [v for k, v in out.items() if k.endswith("_ratio")]
        if ratios:
            out["latency_p99_ratio"] = max(ratios)
        return out


class VllmCollector:
    """Probes one server; keeps the previous counters to report deltas."""

    name = COLLECTOR

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 5.0,
        baseline_seconds: float = 3600.0,
        canary_tokens: Tally | None = None,
        trend_window: float = 3600.0,
        host_available: Callable[[], int] = lambda: int(psutil.virtual_memory().available),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.canary_tokens = canary_tokens or Tally()
        self.timeout = timeout
        self._previous: VllmMetrics | None = None
        self.baseline = LatencyBaseline(baseline_seconds)
        """TTFT and inter-token latency p99 baselines (the first healthy hour)."""
        self.rss_trend = Trend(trend_window)
        """The API server's resident memory as its /metrics says it, while it is the same
        process (``process_start_time_seconds``)."""
        self._host_available = host_available
        self._clock = clock

    async def collect(self) -> list[Sample]:
        """One sample of subject ``server``; a server that does not answer is a sample too."""
        at = self._clock()
        values: dict[str, Any] = {}
        async with httpx.AsyncClient(timeout=self.timeout, trust_env=False) as client:
            t0 = time.monotonic()
            try:
                health = await client.get(self.base_url + "/health")
                values["health_status"] = health.status_code
            except httpx.HTTPError as exc:
                values["health_status"] = 0
                values["health_error"] = type(exc).__name__
            values["health_latency_ms"] = round((time.monotonic() - t0) * 1000, 1)
            if values["health_status"] == 0:
                return [Sample(COLLECTOR, "server", at, values)]
            try:
                metrics = parse_metrics((await client.get(self.base_url + "/metrics")).text)
                models = (await client.get(self.base_url + "/v1/models")).json()
            except (httpx.HTTPError, ValueError) as exc:
                raise CollectorError(f"vllm: {type(exc).__name__}: {exc}") from None
        values.update(metrics.values)
        values.update(self._rss(at, values))
        values.update({f"cache_{k}": v for k, v in metrics.cache_config.items()})
        data = models.get("data") if isinstance(models, dict) else None
        if data and isinstance(data[0], dict) and "max_model_len" in data[0]:
            values["max_model_len"] = data[0]["max_model_len"]
        prev = self._previous
        if prev is not None:
            for key in ("generation_tokens_total", "prompt_tokens_total", "preemptions_total"):
                if key in metrics.values and key in prev.values:
                    delta = metrics.values[key] - prev.values[key]
                    values[key.replace("_total", "_delta")] = max(0.0, delta)
            if "generation_tokens_delta" in values:
                # what the users were served: the canary's own tokens left out
                canary = self.canary_tokens.take()
                values["user_tokens_delta"] = max(0.0, values["generation_tokens_delta"] - canary)
            for name, hist in metrics.buckets.items():
                old = prev.buckets.get(name, {})
                window = {b: c - old.get(b, 0.0) for b, c in hist.items()}
                for q in (0.5, 0.99):
                    value = quantile(window, q)
                    if value is not None:
                        values[f"{name}_p{round(q * 100)}"] = round(value, 4)
        self._previous = metrics
        values.update(self.baseline.update(at, values))
        return [Sample(COLLECTOR, "server", at, values)]

    def _rss(self, at: float, values: dict[str, Any]) -> dict[str, Any]:
        """The API server's memory trend: growth and the time until the host is out of it
        (its limit: what it has plus what the host has free, as the process tree's)."""
        rss = values.get("api_rss_bytes")
        if not isinstance(rss, int | float) or rss <= 0:
            self.rss_trend = Trend(self.rss_trend.window)
            return {}
        limit = rss + self._host_available()
        est = self.rss_trend.add(at, float(rss), float(limit), values.get("api_started_at"))
        if est is None:
            return {}
        return {
            "api_rss_growth_mb_per_h": round(est.growth_per_hour / (1 << 20), 1),
            "api_rss_oom_eta_s": est.eta_s,
        }


def health_probe(base_url: str, timeout: float = 2.0) -> Callable[[], Awaitable[bool | None]]:
    """A probe that is True when ``GET base_url/health`` answers 200 (the supervisor's);
    None when the doctor itself could not ask (out of descriptors): no news, never a restart."""

    async def probe() -> bool | None:
        try:
            async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
                return (await client.get(base_url + "/health")).status_code == 200
        except httpx.HTTPError:
            return False
        except OSError as exc:  # EMFILE and the like: the doctor's trouble, not the server's
            log.warning("health probe could not run: %s", exc)
            return None

    return probe


SPEC = CollectorSpec(
    name=COLLECTOR,
    build=lambda ctx: VllmCollector(
        ctx.server_url,
        timeout=ctx.config.vllm.timeout,
        baseline_seconds=ctx.config.vllm.baseline_seconds,
        canary_tokens=ctx.canary_tokens,
        # the API server's RSS is host memory, as the process tree's: the same window
        trend_window=ctx.config.process.trend_window,
    ),
    enabled=lambda cfg: cfg.vllm.enabled,
    interval=lambda cfg: cfg.vllm.interval,
    needs_server=True,
    while_running=True,  # a starting or stopped server has nothing to say yet
)
"""The ``vllm`` collector as registered."""


__all__ = [
    "COLLECTOR",
    "SPEC",
    "LatencyBaseline",
    "VllmCollector",
    "VllmMetrics",
    "health_probe",
    "parse_metrics",
    "quantile",
]
