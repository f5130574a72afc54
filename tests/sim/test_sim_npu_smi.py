"""The fake npu-smi: table layout, health, process pruning, reset, failure modes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_doctor.sim.host import SimHost
from ascend_doctor.sim.npu_smi_format import render_info

FORMATS = Path("/work/shared/reference/FORMATS.md")


def npu_smi(host: SimHost, *args: str, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    """Run the shim the way the doctor would: only PATH points at the host."""
    env = {**os.environ, "PATH": host.env()["PATH"]}
    env.pop("ASCEND_SIM_STATE", None)
    return subprocess.run(
        ["npu-smi", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_table_matches_the_reference_layout() -> None:
    if not FORMATS.exists():
        pytest.skip("reference FORMATS.md not available")
    sample = FORMATS.read_text().split("```\n")[1]
    state = {
        "devices": [
            {
                "id": 0,
                "name": "910B3",
                "health": "OK",
                "bus_id": "0000:C1:00.0",
                "power": 92.1,
                "temp": 38,
                "idle_hbm_mb": 3402 - 58212,
            },
            {
                "id": 1,
                "name": "910B3",
                "health": "OK",
                "bus_id": "0000:01:00.0",
                "power": 89.7,
                "temp": 37,
                "idle_hbm_mb": 3398,
            },
        ],
        "processes": [{"device": 0, "pid": 12345, "name": "python3", "memory_mb": 58212}],
    }
    # A busy card draws 95 W more; the reference sample shows an idle reading.
    out = render_info(state).replace("187.1", "92.1 ")
    assert out == sample


def test_info_lists_eight_cards_and_live_processes_only(host: SimHost) -> None:
    host.add_process(2, os.getpid(), "python3", 58212)
    host.add_process(5, dead_pid(), "python3", 1000)
    res = npu_smi(host, "info")
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert lines[1].startswith("| npu-smi 24.1.rc2 ")
    assert all(len(line) == 98 for line in lines)
    assert sum(" 910B3 " in line for line in lines) == 8
    assert f"| 2       0                 | {os.getpid():<14}| python3" in res.stdout
    assert "| No running processes found in NPU 5 " in res.stdout
    assert res.stdout.count("No running processes found") == 7
    # The dead holder was pruned from the state too.
    procs = json.loads(host.state_path.read_text())["processes"]
    assert [p["device"] for p in procs] == [2]


def test_health_usages_board(host: SimHost) -> None:
    ok = npu_smi(host, "info", "-t", "health", "-i", "0", "-c", "0")
    assert ok.stdout.splitlines()[0] == "        Health Status                  : OK"
    assert "Error Code                     : NA" in ok.stdout
    host.inject(3, "heartbeat_lost")
    bad = npu_smi(host, "info", "-t", "health", "-i", "3", "-c", "0")
    assert "Health Status                  : Critical" in bad.stdout
    assert "Error Code                     : 80E18005" in bad.stdout
    assert host.device(3)["health"] == "Critical"
    usages = npu_smi(host, "info", "-t", "usages", "-i", "1")
    assert "HBM Capacity(MB)               : 65536" in usages.stdout
    board = npu_smi(host, "info", "-t", "board", "-i", "1", "-c", "0")
    assert "Chip Name                      : 910B3" in board.stdout
    assert "Firmware Version               : 7.5.0.1.220" in board.stdout


def test_reset_refuses_while_held_then_succeeds(host: SimHost) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        host.inject(4, "heartbeat_lost")
        host.add_process(4, holder.pid, "python3", 58000)
        refused = npu_smi(host, "set", "-t", "reset", "-i", "4", "-c", "0")
        assert refused.returncode != 0
        assert "device is used" in refused.stdout
        assert host.device(4)["health"] == "Critical"
    finally:
        holder.kill()
        holder.wait()
    done = npu_smi(host, "set", "-t", "reset", "-i", "4", "-c", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert host.device(4)["health"] == "OK"
    assert host.device(4)["fault"] is None


def test_errors_and_call_log(host: SimHost) -> None:
    assert npu_smi(host, "frobnicate").returncode == 2
    assert npu_smi(host, "set", "-t", "reset", "-i", "9", "-c", "0").returncode == 1
    calls = host.npu_smi_calls()
    assert [c["argv"] for c in calls] == [
        ["frobnicate"],
        ["set", "-t", "reset", "-i", "9", "-c", "0"],
    ]
    assert [c["rc"] for c in calls] == [2, 1]


def test_garbage_and_hang_modes(host: SimHost) -> None:
    host.set_npu_smi_mode("garbage")
    junk = npu_smi(host, "info")
    assert junk.returncode == 0
    assert "910B3" not in junk.stdout and junk.stdout.strip()
    host.set_npu_smi_mode("hang")
    with pytest.raises(subprocess.TimeoutExpired):
        npu_smi(host, "info", timeout=1.0)  # subprocess.run SIGKILLs it on timeout
    assert host.npu_smi_calls()[-1]["argv"] == ["info"]
