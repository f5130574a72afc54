"""The fake API server's ``/metrics``: vLLM's Prometheus metrics, made with prometheus_client.

vLLM registers its metrics with prometheus_client in the API server process
(vllm/v1/metrics/loggers.py ``PrometheusStatLogger``), so the exposition has what that library
writes: ``# HELP``/``# TYPE``, counters as ``_total`` plus ``_created``, histograms with
``_bucket{le=...}``/``_count``/``_sum``/``_created``, labels in declaration order
(``model_name``, ``engine``), and the process/platform/GC collectors. Names, help texts and
bucket bounds below are vLLM's, unchanged from 0.11 to 0.23 for these metrics (sim/SOURCES.md).
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    gc_collector,
    generate_latest,
    platform_collector,
    process_collector,
)

from ascend_doctor.sim.engine_core import ServeConfig
from ascend_doctor.sim.versions import VersionProfile

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
_LABELS = ["model_name", "engine"]


class VllmMetrics:
    """vLLM's metrics of one engine (engine index 0)."""

    def __init__(self, cfg: ServeConfig, version: VersionProfile) -> None:
        self.registry = CollectorRegistry()
        process_collector.ProcessCollector(registry=self.registry)
        platform_collector.PlatformCollector(registry=self.registry)
        gc_collector.GCCollector(registry=self.registry)
        self.cfg, self.version = cfg, version
        r, lv = self.registry, (cfg.served_name, "0")
        self.running = Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            _LABELS,
            registry=r,
        ).labels(*lv)
        self.waiting = Gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            _LABELS,
            registry=r,
        ).labels(*lv)
        self.kv_usage = Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            _LABELS,
            registry=r,
        ).labels(*lv)
        self.preemptions = Counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            _LABELS,
            registry=r,
        ).labels(*lv)
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", _LABELS, registry=r
        ).labels(*lv)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", _LABELS, registry=r
        ).labels(*lv)
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*_LABELS, "finished_reason"],
            registry=r,
        )
        for reason in ("stop", "length", "abort"):
            self.success.labels(*lv, reason)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _LABELS,
            buckets=TTFT_BUCKETS,
            registry=r,
        ).labels(*lv)
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            _LABELS,
            buckets=ITL_BUCKETS,
            registry=r,
        ).labels(*lv)
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            _LABELS,
            buckets=REQUEST_LATENCY_BUCKETS,
            registry=r,
        ).labels(*lv)

    def cache_config_info(self, num_gpu_blocks: int) -> None:
        """``vllm:cache_config_info``: a gauge set to 1 whose labels are the cache config."""
        info: dict[str, str] = {
            "block_size": str(self.cfg.block_size),
            "gpu_memory_utilization": str(self.cfg.gpu_memory_utilization),
        }
        if self.version.has_flag("--swap-space"):
            info["swap_space"] = "4"
        info.update(
            cache_dtype="auto",
            is_attention_free="False",
            num_gpu_blocks_override="None",
            sliding_window="None",
            enable_prefix_caching="True",
            num_gpu_blocks=str(num_gpu_blocks),
            num_cpu_blocks="None",
            engine="0",
        )
        gauge = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            list(info),
            registry=self.registry,
        )
        gauge.labels(**info).set(1)

    def finished(self, prompt: int, gen: int, ttft: float, e2e: float) -> None:
        """Account one finished request."""
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(gen)
        self.success.labels(self.cfg.served_name, "0", "length").inc()
        self.ttft.observe(ttft)
        if gen > 1:
            self.itl.observe(max(0.0, e2e - ttft) / (gen - 1))
        self.e2e.observe(e2e)

    def render(self) -> bytes:
        """The text exposition (format 0.0.4)."""
        return generate_latest(self.registry)
