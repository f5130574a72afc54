"""``ascend-doctor profile analyze DIR [--json]`` on published capture layouts."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ascend_doctor.cli.main import main

PROFILE = Path(__file__).parents[1] / "fixtures" / "profile"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["profile", "analyze", *args])
    return result.exit_code, result.output


def test_the_report_prints_split_operators_copies_and_slow_rank() -> None:
    code, out = _run(str(PROFILE / "msprof-analyze-cluster-8rank"), "--no-advisor")
    assert code == 0, out
    assert "rank 1 is the slow rank" in out and "<- slow" in out
    assert "communication not overlapped" in out
    code, out = _run(str(PROFILE / "torch-npu-1card-timeline"), "--no-advisor")
    assert code == 0, out
    assert "top operators" in out and "host<->device copies" in out
    assert "4 blocking aclrtMemcpy" in out


def test_json_carries_the_same_figures() -> None:
    code, out = _run(str(PROFILE / "msprof-analyze-cluster-8rank"), "--json", "--no-advisor")
    assert code == 0, out
    data = json.loads(out)
    assert data["slowest"]["rank"] == 1 and data["slowest"]["part"] == "free"
    assert [r["rank"] for r in data["ranks"]] == list(range(8))
    assert data["ranks"][1]["split"]["free_us"] == 1488610.0587500026
    _, text = _run(str(PROFILE / "msprof-analyze-cluster-8rank"), "--no-advisor")
    assert data["headline"] in text


def test_a_directory_without_a_capture_exits_2(tmp_path: Path) -> None:
    code, out = _run(str(tmp_path), "--no-advisor")
    assert code == 2 and "no capture found" in out
