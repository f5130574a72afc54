"""The latency baseline of the vllm collector and the performance_regression rule over it."""

from __future__ import annotations

from typing import Any

from ascend_doctor.collectors.vllm import LatencyBaseline
from ascend_doctor.core.events import Category, Sample
from ascend_doctor.rules import Engine, load_rules


def _values(ttft: float, itl: float | None = None, tokens: float = 50.0) -> dict[str, Any]:
    values: dict[str, Any] = {"health_status": 200, "generation_tokens_delta": tokens}
    values["ttft_p99"] = ttft
    if itl is not None:
        values["itl_p99"] = itl
    return values


def test_the_baseline_is_the_median_of_the_first_window() -> None:
    base = LatencyBaseline(window=60)
    for at, ttft in ((0, 0.02), (20, 0.5), (40, 0.02), (59, 0.03)):
        assert base.update(at, _values(ttft, 0.01)) == {}
    assert base.base is None  # the window is not over yet
    assert base.update(60, _values(0.02, 0.01)) == {}
    assert base.base == {"ttft_p99": 0.02, "itl_p99": 0.01}  # one slow interval did not count
    out = base.update(61, _values(0.08, 0.015))
    assert out["ttft_p99_ratio"] == 4.0 and out["itl_p99_ratio"] == 1.5
    assert out["latency_p99_ratio"] == 4.0


def test_an_idle_or_sick_server_teaches_nothing_and_is_not_compared() -> None:
    base = LatencyBaseline(window=10)
    assert base.update(0, _values(0.02, tokens=0)) == {}
    assert base.update(5, {**_values(0.02), "health_status": 503}) == {}
    assert base.started is None  # the window starts with the first flowing sample
    base.update(100, _values(0.02))
    base.update(110, _values(0.02))
    assert base.base == {"ttft_p99": 0.02}
    assert base.update(200, _values(0.2, tokens=0)) == {}


def _sample(at: float, **values: Any) -> Sample:
    return Sample("vllm", "server", at, {"health_status": 200, **values})


def test_the_rule_fires_after_its_hold_with_requests_flowing() -> None:
    engine = Engine(load_rules([]), clock=lambda: 0.0)
    slow = {"latency_p99_ratio": 4.2, "ttft_p99": 0.08, "generation_tokens_delta": 30}
    assert engine.evaluate([_sample(1000, **slow)]) == []
    assert engine.evaluate([_sample(1200, **slow)]) == []
    (found,) = engine.evaluate([_sample(1300, **slow)])
    assert found.rule == "vllm-latency-regression"
    assert found.category == Category.PERFORMANCE_REGRESSION
    assert [[a.name for a in step] for step in found.remediation] == [["capture_profile"]]
    assert "4.2x its baseline" in found.summary


def test_no_requests_or_a_small_rise_does_not_fire() -> None:
    engine = Engine(load_rules([]), clock=lambda: 0.0)
    idle = {"latency_p99_ratio": 9.0, "generation_tokens_delta": 0}
    mild = {"latency_p99_ratio": 2.5, "generation_tokens_delta": 10}
    for at in range(0, 1000, 100):
        assert engine.evaluate([_sample(at, **idle), _sample(at, **mild)]) == []
