"""Unit tests of the npu_smi collector: parsing on captured text, running on real scripts."""

from __future__ import annotations

import asyncio
import shutil
import stat
import time
from pathlib import Path

import pytest

from ascend_doctor.collectors.npu_smi import (
    NpuDevice,
    NpuInfo,
    NpuProcess,
    dcmi_error,
    parse_info,
    parse_pairs,
    run_npu_smi,
    samples_from_info,
)
from ascend_doctor.core.errors import CollectorError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "npu_smi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# -- parse_info: 910B ------------------------------------------------------------------------


def test_910b_8cards_devices() -> None:
    info = parse_info(fixture("info-910b-8cards.txt"))
    assert info.version == "24.1.rc2"
    assert [d.npu for d in info.devices] == list(range(8))
    assert {d.chip for d in info.devices} == {0}
    assert {d.name for d in info.devices} == {"910B3"}
    assert {d.health for d in info.devices} == {"OK"}
    assert [d.bus_id for d in info.devices] == [
        "0000:C1:00.0",
        "0000:01:00.0",
        "0000:C2:00.0",
        "0000:02:00.0",
        "0000:81:00.0",
        "0000:41:00.0",
        "0000:82:00.0",
        "0000:42:00.0",
    ]
    assert [d.hbm_used_mb for d in info.devices] == [
        61614,
        3398,
        3401,
        3397,
        3402,
        3399,
        3400,
        3396,
    ]
    assert {d.hbm_total_mb for d in info.devices} == {65536}
    assert all(d.chip_phy_id is None for d in info.devices)


def test_910b_first_device_all_fields() -> None:
    info = parse_info(fixture("info-910b-8cards.txt"))
    assert info.devices[0] == NpuDevice(
        npu=0,
        chip=0,
        name="910B3",
        health="OK",
        power_w=263.5,
        temp_c=52,
        aicore_pct=43,
        hbm_used_mb=61614,
        hbm_total_mb=65536,
        bus_id="0000:C1:00.0",
        hugepages_used=0,
        hugepages_total=0,
        chip_phy_id=None,
    )


def test_910b_processes_per_device() -> None:
    info = parse_info(fixture("info-910b-8cards.txt"))
    assert info.processes == (
        NpuProcess(npu=0, chip=0, pid=3114702, name="python3", memory_mb=58212),
    )
    assert info.processes_on(0) == [info.processes[0]]
    for npu in range(1, 8):
        assert info.processes_on(npu) == []


def test_910b_critical_device() -> None:
    info = parse_info(fixture("info-910b-critical.txt"))
    assert info.version == "24.1.rc3"
    assert len(info.devices) == 8
    assert {d.npu: d.health for d in info.devices if d.health != "OK"} == {3: "Critical"}
    critical = info.devices[3]
    assert (critical.power_w, critical.temp_c, critical.hbm_used_mb) == (71.3, 45, 3397)
    assert info.processes == ()


def test_container_pid_process_table() -> None:
    info = parse_info(fixture("info-910b-container-pid.txt"))
    assert info.version == "25.2.0"
    assert [(d.npu, d.health) for d in info.devices] == [
        (0, "OK"),
        (1, "OK"),
        (2, "Warning"),
        (3, "OK"),
    ]
    # Real 25.x output squeezes 5-digit usage to "53984/ 65536".
    assert [(d.hbm_used_mb, d.hbm_total_mb) for d in info.devices] == [
        (53984, 65536),
        (53981, 65536),
        (3410, 65536),
        (3406, 65536),
    ]
    assert [d.aicore_pct for d in info.devices] == [61, 58, 0, 0]
    # The "Process id" column (host namespace) is the pid, not the container one.
    assert info.processes_on(0) == [
        NpuProcess(npu=0, chip=0, pid=1712733, name="VLLMWorker_TP0", memory_mb=48954),
        NpuProcess(npu=0, chip=0, pid=1712740, name="python3", memory_mb=1536),
    ]
    assert info.processes_on(1) == [
        NpuProcess(npu=1, chip=0, pid=1712734, name="VLLMWorker_TP1", memory_mb=50478),
    ]
    assert info.processes_on(2) == []
    assert info.processes_on(3) == []


# -- parse_info: A3 --------------------------------------------------------------------------


def test_a3_two_chips_per_npu() -> None:
    info = parse_info(fixture("info-a3-2chip.txt"))
    assert info.version == "25.0.rc1.1"
    assert [(d.npu, d.chip, d.chip_phy_id) for d in info.devices] == [
        (0, 0, 0),
        (0, 1, 1),
        (1, 0, 2),
        (1, 1, 3),
    ]
    assert {d.name for d in info.devices} == {"Ascend910"}
    assert [d.power_w for d in info.devices] == [171.3, None, 160.4, None]
    assert [d.temp_c for d in info.devices] == [41, 43, 43, 44]
    assert [d.health for d in info.devices] == ["OK", "OK", "OK", "Alarm"]
    assert [d.bus_id for d in info.devices] == [
        "0000:9D:00.0",
        "0000:9F:00.0",
        "0000:99:00.0",
        "0000:9B:00.0",
    ]
    assert [d.hbm_used_mb for d in info.devices] == [46904, 46582, 3125, 3130]


def test_a3_processes_keep_their_chip() -> None:
    info = parse_info(fixture("info-a3-2chip.txt"))
    assert [(p.npu, p.chip, p.pid) for p in info.processes_on(0)] == [
        (0, 0, 240518),
        (0, 1, 240519),
    ]
    assert info.processes_on(1) == []


# -- parse_info: robustness ------------------------------------------------------------------


def test_column_widths_do_not_matter() -> None:
    narrow = "\n".join(
        [
            "| npu-smi 23.0.0 Version: 23.0.0 |",
            "| NPU Name | Health | Power(W) Temp(C) Hugepages-Usage(page) |",
            "| Chip | Bus-Id | AICore(%) Memory-Usage(MB) HBM-Usage(MB) |",
            "| 5 910B4-1 | UNKNOWN | NA 33 1 /2 |",
            "| 0 | 0000:C1:00.0 | 2 0/0 100 /32768 |",
            "| NPU Chip | Process id | Process name | Process memory(MB) |",
            "| 5 0 | 77 | vllm serve | 99 |",
        ]
    )
    info = parse_info(narrow)
    assert info == NpuInfo(
        version="23.0.0",
        devices=(
            NpuDevice(
                npu=5,
                chip=0,
                name="910B4-1",
                health="UNKNOWN",
                power_w=None,
                temp_c=33,
                aicore_pct=2,
                hbm_used_mb=100,
                hbm_total_mb=32768,
                bus_id="0000:C1:00.0",
                hugepages_used=1,
                hugepages_total=2,
            ),
        ),
        processes=(NpuProcess(npu=5, chip=0, pid=77, name="vllm serve", memory_mb=99),),
    )


@pytest.mark.parametrize("name", ["garbage.txt", "dcmi-8005.txt", "health-ok.txt", "usages.txt"])
def test_not_a_table_raises(name: str) -> None:
    with pytest.raises(CollectorError, match=r"^npu-smi info: "):
        parse_info(fixture(name))


def test_empty_text_raises() -> None:
    with pytest.raises(CollectorError, match=r"^npu-smi info: not an npu-smi table"):
        parse_info("")


def test_dcmi_failure_names_the_code() -> None:
    with pytest.raises(CollectorError, match=r"dcmi error -8005"):
        parse_info(fixture("dcmi-8005.txt"))


def test_truncated_table_raises() -> None:
    text = fixture("info-910b-8cards.txt")
    cut = text[: text.index("| 0                         | 0000:01:00.0")]
    with pytest.raises(CollectorError, match=r"NPU 1 has no chip row"):
        parse_info(cut)


def test_bad_npu_id_raises_quoting_the_row() -> None:
    text = fixture("info-910b-8cards.txt").replace("| 4     910B3", "| x     910B3")
    with pytest.raises(CollectorError, match=r"NPU id is 'x': expected an integer"):
        parse_info(text)


# -- parse_pairs and dcmi_error --------------------------------------------------------------


def test_pairs_health_ok() -> None:
    assert parse_pairs(fixture("health-ok.txt")) == {
        "Health Status": "OK",
        "Error Code": "NA",
        "Error Information": "NA",
    }


def test_pairs_health_critical() -> None:
    pairs = parse_pairs(fixture("health-critical.txt"))
    assert pairs["Health Status"] == "Critical"
    assert pairs["Error Code"] == "80E18005"
    assert pairs["Error Information"].startswith("node type=HBM")


def test_pairs_usages() -> None:
    pairs = parse_pairs(fixture("usages.txt"))
    assert len(pairs) == 14
    assert pairs["HBM Capacity(MB)"] == "65536"
    assert pairs["HBM Usage Rate(%)"] == "5"
    assert pairs["Aicore Usage Rate(%)"] == "0"
    assert pairs["NPU Utilization(%)"] == "0"
    assert pairs["HBM Bandwidth Usage Rate(%)"] == "0"


def test_pairs_value_may_hold_colons() -> None:
    assert parse_pairs("  PCIe Bus Info : 0000:C1:00.0\nno pair here\n") == {
        "PCIe Bus Info": "0000:C1:00.0"
    }


def test_dcmi_error_codes() -> None:
    assert dcmi_error(fixture("dcmi-8005.txt")) == -8005
    assert dcmi_error("dcmi get card list failed because the device is used. ret is -8020") == -8020
    assert dcmi_error(fixture("info-910b-8cards.txt")) is None
    assert dcmi_error(fixture("garbage.txt")) is None


# -- samples_from_info -----------------------------------------------------------------------


def test_samples_910b() -> None:
    samples = samples_from_info(parse_info(fixture("info-910b-8cards.txt")), at=1700000000.0)
    assert [s.subject for s in samples] == [f"npu{i}" for i in range(8)]
    assert {s.collector for s in samples} == {"npu_smi"}
    assert {s.at for s in samples} == {1700000000.0}
    assert samples[0].values == {
        "health": "OK",
        "hbm_used_mb": 61614,
        "hbm_total_mb": 65536,
        "hbm_used_pct": 94.0,
        "power_w": 263.5,
        "temp_c": 52,
        "aicore_pct": 43,
        "bus_id": "0000:C1:00.0",
        "name": "910B3",
        "pids": [3114702],
        "driver_version": "24.1.rc2",
    }
    assert samples[1].values["pids"] == []


def test_samples_a3_subjects_and_pids() -> None:
    samples = samples_from_info(parse_info(fixture("info-a3-2chip.txt")), at=5.0)
    assert [s.subject for s in samples] == ["npu0", "npu0.1", "npu1", "npu1.1"]
    assert [s.values["pids"] for s in samples] == [[240518], [240519], [], []]
    assert samples[1].values["power_w"] is None
    assert samples[3].values["health"] == "Alarm"


# -- run_npu_smi against real scripts --------------------------------------------------------


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


async def test_run_prints_a_table(tmp_path: Path) -> None:
    table = FIXTURES / "info-910b-8cards.txt"
    fake = script(tmp_path, "npu-smi", f'[ "$1" = info ] || exit 2\ncat "{table}"\n')
    result = await run_npu_smi(str(fake), ["info"], timeout=10)
    assert result.argv == (str(fake), "info")
    assert result.returncode == 0
    assert result.timed_out is False
    assert result.stderr == ""
    assert result.stdout == fixture("info-910b-8cards.txt")
    assert result.duration >= 0
    assert len(parse_info(result.stdout).devices) == 8


async def test_run_reports_exit_status_and_stderr(tmp_path: Path) -> None:
    fake = script(
        tmp_path, "npu-smi", "echo 'dcmi module initialize failed. ret is -8005' >&2\nexit 3\n"
    )
    result = await run_npu_smi(str(fake), ["info"], timeout=10)
    assert result.returncode == 3
    assert result.timed_out is False
    assert result.stdout == ""
    assert dcmi_error(result.stderr) == -8005


async def test_run_passes_env(tmp_path: Path) -> None:
    fake = script(tmp_path, "npu-smi", 'printf "%s" "$ASCEND_VISIBLE"\n')
    result = await run_npu_smi(
        str(fake), [], timeout=10, env={"ASCEND_VISIBLE": "0,1", "PATH": "/usr/bin:/bin"}
    )
    assert result.stdout == "0,1"


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a container's init may not reap)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] != "Z"


async def test_run_timeout_kills_the_group(tmp_path: Path) -> None:
    # The shell forks sleep: killing only the shell would leave sleep holding our pipes for
    # 30 s, so returning quickly proves the whole group was killed.
    pidfile = tmp_path / "sleep.pid"
    fake = script(tmp_path, "npu-smi", f'echo partial\nsleep 30 &\necho $! > "{pidfile}"\nwait\n')
    started = time.monotonic()
    result = await run_npu_smi(str(fake), ["info"], timeout=0.5)
    elapsed = time.monotonic() - started
    assert result.timed_out is True
    assert result.returncode is None
    assert result.stdout == "partial\n"
    assert 0.5 <= elapsed < 1.5
    assert 0.5 <= result.duration < 1.5
    sleep_pid = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while _alive(sleep_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(sleep_pid)


async def test_run_plain_sleep_times_out(tmp_path: Path) -> None:
    fake = script(tmp_path, "npu-smi", "sleep 30\n")
    started = time.monotonic()
    result = await run_npu_smi(str(fake), [], timeout=0.5)
    assert result.timed_out is True
    assert result.returncode is None
    assert time.monotonic() - started < 1.5


async def test_run_missing_binary(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-npu-smi"
    with pytest.raises(CollectorError, match=f"^npu-smi not found: {missing}$"):
        await run_npu_smi(str(missing), ["info"], timeout=1)


async def test_run_not_executable(tmp_path: Path) -> None:
    plain = tmp_path / "npu-smi"
    plain.write_text("#!/bin/sh\necho hi\n", encoding="utf-8")
    plain.chmod(0o644)
    with pytest.raises(CollectorError, match=f"^npu-smi not executable: {plain}$"):
        await run_npu_smi(str(plain), ["info"], timeout=1)


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid(1)")
async def test_run_does_not_wait_for_a_helper_that_left_the_group(tmp_path: Path) -> None:
    # The helper holds stdout open after npu-smi itself exited 0: that is not a timeout,
    # and the call returns after the short grace instead of waiting for the helper.
    fake = script(tmp_path, "npu-smi", "setsid sleep 3 &\necho done\n")
    started = time.monotonic()
    result = await run_npu_smi(str(fake), [], timeout=10)
    assert result.timed_out is False
    assert result.returncode == 0
    assert result.stdout == "done\n"
    assert time.monotonic() - started < 2.5


async def test_cancelled_run_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    fake = script(tmp_path, "npu-smi", f'sleep 30 &\necho $! > "{pidfile}"\nwait\n')
    task = asyncio.create_task(run_npu_smi(str(fake), [], timeout=30))
    deadline = time.monotonic() + 5
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    sleep_pid = int(pidfile.read_text())
    deadline = time.monotonic() + 2
    while _alive(sleep_pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not _alive(sleep_pid)


def test_reset_output_is_parsed() -> None:
    from ascend_doctor.collectors.npu_smi import parse_reset

    board = (
        "Resetting the standard PCIe card or NPU chip may cause a system hang or abnormal reset "
        "during service running.\nAre you sure you want to continue resetting?(Y/N)\n"
        "It's AMP mode, but hccs is on, it will reboot all devices, do you want to continue "
        "reboot? [y/n]\n\tMessage                        : resetting (about 150 seconds) ...\n"
        "\tStatus                         : OK\n"
        "\tMessage                        : Reset server successfully.\n"
    )
    ok = parse_reset(board)
    assert (ok.status, ok.message, ok.board) == ("OK", "Reset server successfully.", True)
    aborted = parse_reset(
        "Are you sure you want to continue resetting?(Y/N)\n"
        "\tStatus                         : Fail\n"
        "\tMessage                        : User aborts reset server by inband.\n"
    )
    assert (aborted.status, aborted.message, aborted.board) == (
        "Fail", "User aborts reset server by inband.", False,
    )  # fmt: skip
