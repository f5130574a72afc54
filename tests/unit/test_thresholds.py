"""Threshold rules over samples, with hold times, on a fake timeline."""

from ascend_doctor.core.events import Category, Sample
from ascend_doctor.rules import Engine, load_rules


def vllm(at: float, **values: object) -> Sample:
    base = {"health_status": 200, "running": 3, "waiting": 0, "kv_cache_usage": 0.5}
    return Sample("vllm", "server", at, {**base, **values})


def test_server_hang_after_a_minute_without_tokens() -> None:
    engine = Engine(load_rules())
    assert engine.evaluate([vllm(0, generation_tokens_delta=0)]) == []
    assert engine.evaluate([vllm(30, generation_tokens_delta=0)]) == []
    (f,) = engine.evaluate([vllm(60, generation_tokens_delta=0)])
    assert f.rule == "vllm-server-hang" and f.category == Category.SERVER_HANG
    assert (
        f.summary
        == "no token generated for a minute with requests running (3) while /health says 200"
    )
    assert engine.evaluate([vllm(90, generation_tokens_delta=0)]) == []  # once per episode


def test_progress_resets_the_hang_window() -> None:
    engine = Engine(load_rules())
    engine.evaluate([vllm(0, generation_tokens_delta=0)])
    engine.evaluate([vllm(50, generation_tokens_delta=12)])
    assert engine.evaluate([vllm(70, generation_tokens_delta=0)]) == []
    assert engine.evaluate([vllm(100, generation_tokens_delta=0)]) == []
    assert [f.rule for f in engine.evaluate([vllm(130, generation_tokens_delta=0)])] == [
        "vllm-server-hang"
    ]


def test_idle_server_is_not_hung() -> None:
    engine = Engine(load_rules())
    for t in range(0, 300, 10):
        assert engine.evaluate([vllm(t, running=0, generation_tokens_delta=0)]) == []


def test_kv_cache_pressure_needs_waiting_requests() -> None:
    engine = Engine(load_rules())
    for t in range(0, 200, 10):
        assert engine.evaluate([vllm(t, kv_cache_usage=0.99, generation_tokens_delta=5)]) == []
    hits = []
    for t in range(200, 300, 10):
        hits += engine.evaluate(
            [vllm(t, kv_cache_usage=0.99, waiting=4, generation_tokens_delta=5)]
        )
    assert [f.rule for f in hits] == ["vllm-kv-cache-pressure"]


def test_temperature_and_hbm_hold_times() -> None:
    engine = Engine(load_rules())
    hot = {
        "health": "OK",
        "temp_c": 97,
        "hbm_used_pct": 99.5,
        "hbm_used_mb": 65200,
        "hbm_total_mb": 65536,
    }
    fired = []
    for t in range(0, 310, 10):
        fired += [f.rule for f in engine.evaluate([Sample("npu_smi", "npu2", t, hot)])]
    assert fired == ["npu-smi-temperature-high", "npu-smi-hbm-full"]
