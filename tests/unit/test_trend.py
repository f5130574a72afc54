"""Memory creep: the trend on captured npu-smi text whose HBM grows, what resets it, and when
a planned restart goes (quiet, urgent, to a human)."""

from __future__ import annotations

import pytest

from ascend_doctor.collectors.npu_smi import NpuSmiCollector, parse_info, samples_from_info
from ascend_doctor.collectors.trend import Trend
from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.events import Sample
from ascend_doctor.core.quiet import closer_together, quiet_now, restart_moment
from ascend_doctor.rules import Engine, load_rules
from tests.conftest import FIXTURES

INFO = (FIXTURES / "npu_smi" / "info-910b-8cards.txt").read_text()
HBM0 = "61614 / 65536"  # NPU 0, held by one python3 process


def npu0(text: str, at: float) -> Sample:
    (sample,) = [s for s in samples_from_info(parse_info(text), at) if s.subject == "npu0"]
    return sample


def grown(mb: int) -> str:
    return INFO.replace(HBM0, f"{mb} / 65536")


def test_hbm_that_grows_steadily_gets_a_time_to_full() -> None:
    c = NpuSmiCollector("npu-smi", timeout=1, trend_window=600)
    out = [c._with_trend(npu0(grown(61614 + 4 * n), 1000.0 + 5 * n)) for n in range(61)]
    assert "hbm_oom_eta_s" not in out[30].values  # half the window not yet seen
    last = out[-1].values
    assert last["hbm_growth_mb_per_h"] == pytest.approx(2880.0)  # 4 MB every 5 s
    assert last["hbm_oom_eta_s"] == pytest.approx((65536 - 61854) / 0.8, rel=0.01)
    (finding,) = Engine(load_rules()).evaluate([out[-1]])
    assert finding.rule == "npu-hbm-creep" and finding.subject == "npu0"
    assert finding.remediation[0][-1].name == "restart_when_quiet"


def test_flat_hbm_has_no_time_to_full() -> None:
    c = NpuSmiCollector("npu-smi", timeout=1, trend_window=60)
    out = [c._with_trend(npu0(INFO, 1000.0 + 5 * n)) for n in range(13)]
    assert out[-1].values["hbm_growth_mb_per_h"] == 0.0
    assert out[-1].values["hbm_oom_eta_s"] is None
    assert Engine(load_rules()).evaluate([out[-1]]) == []


def test_a_new_process_or_a_step_starts_the_trend_over() -> None:
    t = Trend(window=60)
    for n in range(10):
        t.add(5.0 * n, 1000.0 + n, 65536, key=(111,))
    assert t.add(50.0, 1010.0, 65536, key=(222,)) is None  # a restarted server: new process
    for n in range(11, 20):
        t.add(5.0 * n, 1010.0 + n, 65536, key=(222,))
    # the KV cache pool allocated at once is a step, not creep
    assert t.add(100.0, 60000.0, 65536, key=(222,)) is None


def test_an_idle_card_or_a_starting_server_has_no_trend() -> None:
    serving = [False]
    c = NpuSmiCollector("npu-smi", timeout=1, trend_window=60, serving=lambda: serving[0])
    for n in range(13):
        sample = c._with_trend(npu0(grown(3400 + 1000 * n), 1000.0 + 5 * n))
    assert "hbm_oom_eta_s" not in sample.values and not c.trends


def test_quiet_is_nothing_served_or_the_lowest_load_of_a_full_window() -> None:
    busy = [(float(t), 300.0 if t % 120 else 500.0) for t in range(0, 3600, 60)]
    assert busy[-2:] == [(3480.0, 500.0), (3540.0, 300.0)]
    assert quiet_now([*busy, (3590.0, 500.0)], 3590.0, 3600) is None
    assert quiet_now([*busy, (3600.0, 0.0)], 3600.0, 3600) == (
        "no user request was served in the last interval"
    )
    lowest = quiet_now([*busy, (3600.0, 120.0)], 3600.0, 3600)
    assert lowest == "the lowest load of the last 60 minutes (120 tokens)"
    # ten minutes of history say nothing about the lowest load of an hour
    assert quiet_now([(3000.0, 500.0), (3600.0, 120.0)], 3600.0, 3600) is None


def test_planned_restarts_that_come_closer_together_go_to_a_human() -> None:
    assert closer_together([0.0, 36000.0]) is None
    assert closer_together([0.0, 36000.0, 70000.0]) is None  # jitter, not a faster leak
    said = closer_together([0.0, 36000.0, 54000.0])
    assert said == "planned restarts come closer together (600.0 min, then 300.0 min apart)"


def test_restart_moment() -> None:
    cfg = RemediationConfig(quiet_retry=60.0, quiet_window=3600.0)
    serving = [(3590.0, {"user_tokens_delta": 800.0, "generation_tokens_delta": 808.0})]
    eta = {"hbm_oom_eta_s": "3000"}
    assert restart_moment(3600.0, [0.0], eta, 30.0, serving, cfg) == (
        3660.0,
        "the restart waits for a quiet window: users are being served",
    )
    # the canary's own tokens are no users
    idle = [(3590.0, {"user_tokens_delta": 0.0, "generation_tokens_delta": 8.0})]
    assert restart_moment(3600.0, [0.0], eta, 30.0, idle, cfg) is None
    # the card is full before the next look: now, served or not
    assert restart_moment(3600.0, [0.0], {"hbm_oom_eta_s": "200"}, 30.0, serving, cfg) is None
    # the host is out of memory first by the API server's own /metrics
    assert restart_moment(3600.0, [0.0], {"api_rss_oom_eta_s": "200"}, 30.0, serving, cfg) is None
    when, why = restart_moment(3600.0, [0.0, 2400.0], eta, 30.0, idle, cfg) or (0, "")
    assert when is None and why.startswith("planned restarts come closer together")
