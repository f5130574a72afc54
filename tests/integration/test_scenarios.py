"""Each demo scenario end to end: real fake-server processes, the fake npu-smi on PATH,
real files, real HTTP on loopback, the real CLI. Outcomes are read back from
``ascend-doctor incidents --json``, as an operator would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ascend_doctor.sim.versions import NEWEST, OLDEST

pytestmark = pytest.mark.integration

DOCTOR = [sys.executable, "-m", "ascend_doctor"]


def doctor(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_")}
    return subprocess.run(
        [*DOCTOR, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def incidents(state: Path) -> list[dict[str, Any]]:
    out = doctor("incidents", "--state-dir", str(state), "--json")
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.fixture(params=[OLDEST, NEWEST], ids=lambda v: f"vllm{v}")
def version(request: pytest.FixtureRequest) -> str:
    """Every scenario runs on the oldest and the newest simulated release."""
    line: str = request.param
    return line


def run_scenario(
    tmp_path: Path, name: str, version: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    state = tmp_path / "state"
    result = doctor("demo", "--scenario", name, "--state-dir", str(state), "--sim-version", version)
    assert f"serving stack: vLLM {version}.0," in result.stdout
    return result, state


def summary(stdout: str) -> str:
    """The one scenario's line of the demo's closing summary (after "tour took")."""
    return stdout.split("\ntour took", 1)[1].splitlines()[1]


def only(rows: list[dict[str, Any]], category: str) -> dict[str, Any]:
    found = [r for r in rows if r["category"] == category]
    assert len(found) == 1, rows
    return found[0]


def test_kv_cache_lowers_max_model_len_to_what_fits(tmp_path: Path, version: str) -> None:
    result, state = run_scenario(tmp_path, "kv-cache", version)
    assert result.returncode == 0, result.stdout + result.stderr
    inc = only(incidents(state), "kv_cache_insufficient")
    assert inc["state"] == "resolved"
    assert inc["rule"] == "vllm-kv-cache-max-len-estimate"
    (action,) = [a for a in inc["actions"] if a["name"] == "lower_max_model_len"]
    assert action["outcome"] == "ok"
    estimate = action["params"]["fits"]
    assert f"estimated maximum model length is {estimate}" in (state / "server.log").read_text()
    assert action["params"]["to"] <= estimate
    assert action["params"]["to"] % 128 == 0
    assert action["params"]["from"] == 32768
    # the server came up healthy with it: the last start ran with the new value
    log = (state / "server.log").read_text()
    assert f"'max_model_len': {action['params']['to']}" in log
    assert "Application startup complete." in log


def test_npu_oom_restarts_with_expandable_segments_and_lower_utilisation(
    tmp_path: Path, version: str
) -> None:
    result, state = run_scenario(tmp_path, "npu-oom", version)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = incidents(state)
    inc = only(rows, "npu_oom")
    assert inc["state"] == "resolved"
    assert not [r for r in rows if r["category"] == "engine_dead"]  # a symptom, attached
    (restart,) = [a for a in inc["actions"] if a["name"] == "restart"]
    assert restart["outcome"] == "ok"
    assert restart["params"]["env"] == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    assert float(restart["params"]["args"]["--gpu-memory-utilization"]) < 0.92
    assert "exited with status 0 after an engine-death line" in result.stdout


def test_device_fault_resets_the_faulty_device(tmp_path: Path, version: str) -> None:
    result, state = run_scenario(tmp_path, "device-fault", version)
    assert result.returncode == 0, result.stdout + result.stderr
    inc = only(incidents(state), "device_fault")
    assert inc["state"] == "resolved"
    assert inc["subject"] == "npu3"
    (reset,) = [a for a in inc["actions"] if a["name"] == "reset_device"]
    assert reset["outcome"] == "ok"
    assert reset["params"]["device"] == 3
    assert reset["params"]["command"] == ["npu-smi", "set", "-t", "reset", "-i", "3", "-c", "0"]
    assert reset["params"]["health_after"] == "OK"
    assert summary(result.stdout).split() == ["device-fault", "recovered"]


def test_graph_capture_failure_next_start_runs_eagerly(tmp_path: Path, version: str) -> None:
    result, state = run_scenario(tmp_path, "graph-capture", version)
    assert result.returncode == 0, result.stdout + result.stderr
    inc = only(incidents(state), "graph_capture_error")
    assert inc["state"] == "resolved"
    (eager,) = [a for a in inc["actions"] if a["name"] == "enforce_eager"]
    assert eager["outcome"] == "ok"
    starts = [
        ln for ln in (state / "server.log").read_text().splitlines() if "enforce_eager=" in ln
    ]
    assert len(starts) == 2
    assert "enforce_eager=False" in starts[0] and "enforce_eager=True" in starts[1]
    (verify,) = [a for a in inc["actions"] if a["name"] == "verify"]
    assert verify["outcome"] == "ok" and "1-token completion" in verify["reason"]


def test_hang_with_health_200_is_detected_from_metrics_and_restarted(
    tmp_path: Path, version: str
) -> None:
    result, state = run_scenario(tmp_path, "hang", version)
    assert result.returncode == 0, result.stdout + result.stderr
    inc = only(incidents(state), "server_hang")
    assert inc["state"] == "resolved"
    names = [(a["name"], a["outcome"]) for a in inc["actions"]]
    assert ("collect_diagnostics", "ok") in names and ("restart", "ok") in names
    # the demo runs with profiling on, but vLLM routes /start_profile through the engine's busy
    # loop: a stuck step would block it, so the doctor declines the capture and still restarts
    (capture,) = [a for a in inc["actions"] if a["name"] == "capture_profile"]
    assert capture["outcome"] == "failed" and "stuck step" in capture["reason"]
    assert names[-1] == ("verify", "ok")


def test_device_busy_refuses_the_reset_and_names_the_holder(tmp_path: Path, version: str) -> None:
    result, state = run_scenario(tmp_path, "device-busy", version)
    assert result.returncode == 0, result.stdout + result.stderr
    inc = only(incidents(state), "device_fault")
    assert inc["state"] == "escalated"
    (reset,) = [a for a in inc["actions"] if a["name"] == "reset_device"]
    assert reset["outcome"] == "refused"
    (holder,) = reset["params"]["holders"]
    assert reset["reason"] == f"reset refused: pid {holder} (python3) holds device 6"
    assert inc["actions"][-1]["name"] == "escalate"
    assert summary(result.stdout).split()[0] == "device-busy"
    assert "escalated to a human" in summary(result.stdout)


def test_crash_loop_escalates_after_its_only_step(tmp_path: Path, version: str) -> None:
    result, state = run_scenario(tmp_path, "crash-loop", version)
    assert result.returncode == 0, result.stdout + result.stderr
    inc = only(incidents(state), "aicore_error")
    assert inc["state"] == "escalated"
    assert [a["name"] for a in inc["actions"]] == ["collect_diagnostics", "restart", "escalate"]
    assert "server    STOPPED  staying stopped" in result.stdout
    # every crash kept what was left of the server before the supervisor decided on it
    crashes = sorted((state / "diagnostics").glob("crash-*"))
    assert crashes, sorted(p.name for p in (state / "diagnostics").iterdir())
    index = json.loads((crashes[0] / "index.json").read_text())
    assert index["reason"].startswith("exited with status")
    assert any(f["name"].startswith("tail-") for f in index["files"])


def test_slow_decode_captures_a_profile_that_names_the_slow_rank(
    tmp_path: Path, version: str
) -> None:
    result, state = run_scenario(tmp_path, "slow-decode", version)
    assert result.returncode == 0, result.stdout + result.stderr
    inc = only(incidents(state), "performance_regression")
    assert inc["rule"] == "vllm-latency-regression" and inc["state"] == "escalated"
    names = [a["name"] for a in inc["actions"]]
    assert "restart" not in names  # a slow server keeps serving
    (capture,) = [a for a in inc["actions"] if a["name"] == "capture_profile"]
    assert capture["outcome"] == "ok"
    assert "rank 1 is the slow rank" in capture["reason"] and "hcom_allReduce" in capture["reason"]
    log = (state / "server.log").read_text()
    assert log.count("Application startup complete.") == 1  # started once, never again
