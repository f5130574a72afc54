"""The fake npu-smi: table layout, health, process pruning, reset, failure modes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_doctor.sim.host import SimHost

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "npu_smi" / "info-910b-8cards.txt"


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


def test_table_has_the_fixture_layout(host: SimHost) -> None:
    """Column for column the layout of the 24.1 driver table (tests/fixtures/npu_smi)."""
    fixture = FIXTURE.read_text().splitlines()
    out = npu_smi(host, "info").stdout.splitlines()
    assert out[:6] == fixture[:6]
    assert [len(ln) for ln in out] == [98] * len(out)
    rows = [ln for ln in out if ln.startswith("| ") and ln[28] == "|"]
    assert all(ln[44] == "|" for ln in rows) and len(rows) >= 16


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


def reset(host: SimHost, device: int, answers: str | None) -> subprocess.CompletedProcess[str]:
    """``npu-smi set -t reset -i N -c 0`` with ``answers`` on stdin (None: stdin closed)."""
    env = {**os.environ, "PATH": host.env()["PATH"]}
    env.pop("ASCEND_SIM_STATE", None)
    return subprocess.run(
        ["npu-smi", "set", "-t", "reset", "-i", str(device), "-c", "0"],
        env=env,
        input=answers if answers is not None else "",
        capture_output=True,
        text=True,
        timeout=10,
    )


def test_health_usages_board(host: SimHost) -> None:
    ok = npu_smi(host, "info", "-t", "health", "-i", "0", "-c", "0")
    assert ok.stdout.splitlines()[0] == "\tHealth Status                  : OK"
    assert "\tError Code                     : NA" in ok.stdout
    host.inject(3, "heartbeat_lost")
    bad = npu_smi(host, "info", "-t", "health", "-i", "3", "-c", "0")
    assert "Health Status                  : Alarm" in bad.stdout
    assert "Error Code                     : 80FA4E00" in bad.stdout
    assert "event state=Heartbeat Lost." in bad.stdout
    usages = npu_smi(host, "info", "-t", "usages", "-i", "1")
    assert "HBM Capacity(MB)               : 65536" in usages.stdout
    board = npu_smi(host, "info", "-t", "board", "-i", "1", "-c", "0")
    assert "Chip Name                      : 910B3" in board.stdout
    assert "Firmware Version               : 7.5.0.1.220" in board.stdout


def test_missing_device_is_an_invalid_card_id(host: SimHost) -> None:
    res = npu_smi(host, "info", "-t", "health", "-i", "9", "-c", "0")
    assert res.stdout.splitlines()[:2] == ["Invalid card id.", "Error parameter of -i"]
    assert res.returncode == (-9001) & 0xFF


def test_reset_with_stdin_closed_aborts_and_changes_nothing(host: SimHost) -> None:
    host.inject(4, "heartbeat_lost")
    res = reset(host, 4, None)
    assert "Are you sure you want to continue resetting?(Y/N)" in res.stdout
    assert "Message                        : User aborts reset server by inband." in res.stdout
    assert res.returncode == (-9016) & 0xFF
    assert host.device(4)["fault"] == "heartbeat_lost"


def test_board_reset_asks_twice_and_resets_every_npu(host: SimHost) -> None:
    host.inject(4, "heartbeat_lost")
    host.inject(6, "hbm_ecc")
    eof = reset(host, 4, "Y\n")
    assert "It's AMP mode, but hccs is on, it will reboot all devices" in eof.stdout
    assert eof.returncode == (-9005) & 0xFF  # EOF at the second question: an inner error
    no = reset(host, 4, "Y\nn\n")
    assert no.returncode == (-9016) & 0xFF
    assert host.device(4)["fault"] == "heartbeat_lost"
    done = reset(host, 4, "y\nmaybe\ny\n")
    assert "Error! Please input 'y' or 'n'!" in done.stdout
    assert "resetting (about 150 seconds) ..." in done.stdout
    assert "Message                        : Reset server successfully." in done.stdout
    assert done.returncode == 0, done.stdout
    assert host.device(4)["fault"] is None and host.device(6)["fault"] is None


def test_reset_fails_while_any_npu_of_the_board_is_held(host: SimHost) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        host.inject(4, "heartbeat_lost")
        host.add_process(1, holder.pid, "python3", 58000)  # another job, another card
        refused = reset(host, 4, "Y\ny\n")
        assert refused.returncode == (-9020) & 0xFF
        assert "Message                        : Failed to reset server" in refused.stdout
        assert host.device(4)["fault"] == "heartbeat_lost"
    finally:
        holder.kill()
        holder.wait()
    host.set_setting("reset_scope", "chip")
    holder2 = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        host.add_process(1, holder2.pid, "python3", 58000)
        alone = reset(host, 4, "Y\n")  # HCCS off: only this chip, one question
        assert alone.returncode == 0, alone.stdout
        assert "hccs is on" not in alone.stdout
        assert host.device(4)["fault"] is None
    finally:
        holder2.kill()
        holder2.wait()


def test_errors_and_call_log(host: SimHost) -> None:
    assert npu_smi(host, "frobnicate").returncode == (-9005) & 0xFF
    assert npu_smi(host, "set", "-t", "reset", "-i", "9", "-c", "0").returncode == 215
    calls = host.npu_smi_calls()
    assert [c["argv"] for c in calls] == [
        ["frobnicate"],
        ["set", "-t", "reset", "-i", "9", "-c", "0"],
    ]
    assert [c["rc"] for c in calls] == [211, 215]


def test_garbage_and_hang_modes(host: SimHost) -> None:
    host.set_npu_smi_mode("garbage")
    junk = npu_smi(host, "info")
    assert junk.returncode == 0
    assert "910B3" not in junk.stdout and junk.stdout.strip()
    host.set_npu_smi_mode("hang")
    with pytest.raises(subprocess.TimeoutExpired):
        npu_smi(host, "info", timeout=1.0)  # subprocess.run SIGKILLs it on timeout
    assert host.npu_smi_calls()[-1]["argv"] == ["info"]
