"""Release profiles: names, flags each release knows, the profiler switch."""

from __future__ import annotations

import pytest

from ascend_doctor.sim.versions import NEWEST, OLDEST, PROFILES, get_profile, known_lines
from ascend_doctor.sim.vllm_args import human_readable_int, human_readable_int_or_auto


def test_names_and_order() -> None:
    assert known_lines() == ["0.11", "0.13", "0.18", "0.23"] and (OLDEST, NEWEST) == (
        "0.11",
        "0.23",
    )
    assert get_profile("v0.18.0") is PROFILES["0.18"] is get_profile("0.18")
    assert get_profile(None).line == OLDEST
    with pytest.raises(ValueError, match="known lines"):
        get_profile("0.18.1")


def test_flags_come_and_go_by_release() -> None:
    has = {line: p.has_flag for line, p in PROFILES.items()}
    assert [has[v]("--profiler-config") for v in known_lines()] == [False, True, True, True]
    assert [has[v]("--swap-space") for v in known_lines()] == [True, True, False, False]
    assert all(has[v]("--max-model-len") for v in known_lines())
    assert [PROFILES[v].profiler_env for v in known_lines()] == [True, True, False, False]


def test_human_readable_ints() -> None:
    assert (human_readable_int("32k"), human_readable_int("32K")) == (32000, 32768)
    assert human_readable_int("25.6k") == 25600
    assert human_readable_int_or_auto("auto") == -1 and human_readable_int_or_auto("1T") == 2**40
    with pytest.raises(ValueError):
        human_readable_int("1T")  # 0.11 knows no T
