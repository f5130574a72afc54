"""The vllm collector's parser on captured /metrics text, and the collector on the simulator."""

from __future__ import annotations

import pytest

from ascend_doctor.collectors.vllm import parse_metrics, quantile
from ascend_doctor.core.errors import CollectorError
from tests.conftest import FIXTURES


def read(name: str) -> str:
    return (FIXTURES / "vllm" / name).read_text()


def test_v1_names_summed_over_engines() -> None:
    m = parse_metrics(read("metrics-v1.txt"))
    assert m.values["running"] == 21
    assert m.values["waiting"] == 3
    assert m.values["kv_cache_usage"] == pytest.approx(0.7)
    assert m.values["preemptions_total"] == 7
    assert m.values["prompt_tokens_total"] == 2234567
    assert m.values["generation_tokens_total"] == 856789
    assert m.cache_config["block_size"] == "128"
    assert m.cache_config["num_gpu_blocks"] == "10922"
    assert m.buckets["ttft"][0.5] == 900


def test_old_cache_usage_name() -> None:
    m = parse_metrics(read("metrics-v0.txt"))
    assert m.values["kv_cache_usage"] == 0.0625
    assert m.values["running"] == 2


def test_quantiles_interpolate_within_buckets() -> None:
    buckets = parse_metrics(read("metrics-v1.txt")).buckets["ttft"]
    assert quantile(buckets, 0.5) == pytest.approx(0.1 + 0.4 * (400 / 800))
    assert quantile(buckets, 0.99) == pytest.approx(1.0)  # beyond the last finite bound
    assert quantile({1.0: 0.0, float("inf"): 0.0}, 0.5) is None


def test_garbage_is_a_collector_error() -> None:
    with pytest.raises(CollectorError, match="not Prometheus text"):
        parse_metrics("this is { not prometheus\n")
