"""deploy/systemd: structure always, ``systemd-analyze verify`` when it is installed."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from ascend_doctor.agent.logwatch import cann_log_root
from ascend_doctor.cli.main import main
from ascend_doctor.core.config_file import load_config

from .units import environment, parse_unit, value, values

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
DOCTOR_UNITS = ["ascend-doctor.service", "ascend-doctor-attach.service"]
DOCTOR_BIN = "/opt/ascend-doctor/bin/ascend-doctor"
NPU_NODES = [
    "/dev/davinci_manager",
    "/dev/devmm_svm",
    "/dev/hisi_hdc",
    *(f"/dev/davinci{i}" for i in range(8)),
]


def _watch_options() -> dict[str, bool]:
    """Every option of ``ascend-doctor watch`` -> whether it takes a value."""
    watch = main.commands["watch"]
    opts: dict[str, bool] = {}
    for param in watch.params:
        if isinstance(param, click.Option):
            for name in [*param.opts, *param.secondary_opts]:
                opts[name] = not param.is_flag
    return opts


def _exec_argv(unit_name: str) -> list[str]:
    unit = parse_unit(SYSTEMD / unit_name)
    starts = values(unit, "Service", "ExecStart")
    assert len(starts) == 1, f"{unit_name}: one ExecStart"
    return shlex.split(starts[0])


def _doctor_args(argv: list[str]) -> dict[str, list[str]]:
    """The doctor's own options in an ExecStart (up to ``--``), checked against the real CLI."""
    assert argv[0] == DOCTOR_BIN and argv[1] == "watch"
    known = _watch_options()
    found: dict[str, list[str]] = {}
    rest = argv[2:]
    i = 0
    while i < len(rest) and rest[i] != "--":
        opt = rest[i]
        assert opt in known, f"ExecStart passes {opt}, which `ascend-doctor watch` does not know"
        if known[opt]:
            found.setdefault(opt, []).append(rest[i + 1])
            i += 2
        else:
            found.setdefault(opt, [])
            i += 1
    return found


@pytest.mark.parametrize("name", DOCTOR_UNITS)
def test_execstart_uses_real_watch_options(name: str) -> None:
    argv = _exec_argv(name)
    if "--attach" in argv and "--attach" not in _watch_options():
        pytest.skip("attach mode (`watch --attach`, issue 5) is not in this build's CLI yet")
    args = _doctor_args(argv)
    assert args["--config"] == ["/etc/ascend-doctor/config.toml"]
    unit = parse_unit(SYSTEMD / name)
    assert args["--state-dir"] == [f"/var/lib/{value(unit, 'Service', 'StateDirectory')}"]
    if name == "ascend-doctor-attach.service":
        assert "--" not in argv, "attach mode starts no server"
        assert args["--url"] == ["http://127.0.0.1:8000"]
        restart = shlex.split(args["--restart-command"][0])
        assert restart == ["systemctl", "restart", "vllm.service"]


def test_supervise_unit_runs_the_server_from_its_env_file() -> None:
    argv = _exec_argv("ascend-doctor.service")
    assert argv[argv.index("--") + 1 :] == ["$SERVER_COMMAND"]
    unit = parse_unit(SYSTEMD / "ascend-doctor.service")
    assert value(unit, "Service", "EnvironmentFile") == "/etc/ascend-doctor/server.env"
    env_lines = [
        ln
        for ln in (SYSTEMD / "server.env").read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    assert len(env_lines) == 1 and env_lines[0].startswith("SERVER_COMMAND=")
    command = env_lines[0].split("=", 1)[1].split()
    assert command[0].startswith("/") and command[1] == "serve" and "--port" in command
    # the doctor stops the server itself: systemd's SIGTERM must reach the doctor only
    assert value(unit, "Service", "KillMode") == "mixed"
    grace = load_config(None).server.stop_grace
    assert float(value(unit, "Service", "TimeoutStopSec").rstrip("s")) > grace


@pytest.mark.parametrize("name", [*DOCTOR_UNITS, "vllm.service"])
def test_service_basics(name: str) -> None:
    unit = parse_unit(SYSTEMD / name)
    assert value(unit, "Unit", "Description")
    assert value(unit, "Service", "Restart") == "on-failure"
    assert value(unit, "Install", "WantedBy") == "multi-user.target"
    user = value(unit, "Service", "User")
    assert user and user != "root", "device resets (root) are a drop-in, never the default"
    assert "HwHiAiUser" in (value(unit, "Service", "SupplementaryGroups") or "").split()
    if name in DOCTOR_UNITS:
        assert value(unit, "Service", "StandardOutput") == "journal"
        assert value(unit, "Service", "StandardError") == "journal"
        assert value(unit, "Service", "NoNewPrivileges") == "yes"
        assert value(unit, "Service", "StateDirectory") == "ascend-doctor"
        assert value(unit, "Service", "ConfigurationDirectory") == "ascend-doctor"


@pytest.mark.parametrize("name", DOCTOR_UNITS)
def test_sandbox_still_allows_what_the_doctor_needs(name: str) -> None:
    unit = parse_unit(SYSTEMD / name)
    # the CANN log root defaults to ~/ascend/log: the homes must stay readable
    assert value(unit, "Service", "ProtectHome") in (None, "no", "read-only")
    assert value(unit, "Service", "PrivateDevices") in (None, "no")
    hidden = " ".join(
        values(unit, "Service", "InaccessiblePaths")
        + values(unit, "Service", "TemporaryFileSystem")
    ).split()
    for needed in ("/var/log/npu", "/usr/local/sbin", "/usr/local/Ascend", "/usr/local/dcmi"):
        assert not any(needed.startswith(h.lstrip("-")) for h in hidden), needed
    if value(unit, "Service", "DevicePolicy") in ("closed", "strict"):
        allowed = {v.split()[0] for v in values(unit, "Service", "DeviceAllow")}
        assert set(NPU_NODES) <= allowed
    env = environment(unit)
    path = env["PATH"].split(":")
    assert "/usr/local/sbin" in path and "/usr/local/Ascend/driver/tools" in path
    assert "/usr/local/dcmi" in env["LD_LIBRARY_PATH"].split(":")
    # the CANN root the doctor derives must be the one the server writes to
    root = cann_log_root(env)
    assert str(root) == env["ASCEND_PROCESS_LOG_PATH"]


def test_attach_unit_reads_what_the_vllm_unit_writes() -> None:
    doctor = parse_unit(SYSTEMD / "ascend-doctor-attach.service")
    vllm = parse_unit(SYSTEMD / "vllm.service")
    root = cann_log_root(environment(doctor))
    assert root == cann_log_root(environment(vllm))
    out = value(vllm, "Service", "StandardOutput")
    assert out and out.startswith("append:")
    argv = _exec_argv("ascend-doctor-attach.service")
    logs = [argv[i + 1] for i, a in enumerate(argv) if a == "--log"]
    assert logs == [out.removeprefix("append:")]
    assert "vllm" in (value(doctor, "Service", "SupplementaryGroups") or "").split()
    assert value(doctor, "Unit", "After") and "vllm.service" in value(doctor, "Unit", "After")
    # the doctor's sandbox is stricter than the server's, but its state dir is writable
    assert value(doctor, "Service", "ProtectSystem") == "strict"


def test_device_reset_is_a_root_dropin_and_off_by_default() -> None:
    dropin = parse_unit(SYSTEMD / "device-reset.conf")
    assert value(dropin, "Service", "User") == "root"
    assert load_config(None).remediation.allow_device_reset is False
    example = load_config(ROOT / "docs" / "ascend-doctor.example.toml")
    assert example.remediation.allow_device_reset is False


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    # verify checks that ExecStart's binary exists: point it at this build's doctor
    doctor = Path(sys.executable).with_name("ascend-doctor")
    assert doctor.exists(), doctor
    true = shutil.which("true")
    assert true
    for src in SYSTEMD.glob("*.service"):
        text = src.read_text().replace(DOCTOR_BIN, str(doctor)).replace("/opt/vllm/bin/vllm", true)
        (tmp_path / src.name).write_text(text)
    dropins = tmp_path / "ascend-doctor.service.d"
    dropins.mkdir()
    shutil.copy(SYSTEMD / "device-reset.conf", dropins / "device-reset.conf")
    units = sorted(str(p) for p in tmp_path.glob("*.service"))
    assert len(units) == 3
    proc = subprocess.run(
        [tool, "verify", "--man=no", *units], capture_output=True, text=True, timeout=120
    )
    ours = [ln for ln in (proc.stdout + proc.stderr).splitlines() if str(tmp_path) in ln]
    assert proc.returncode == 0 and not ours, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", DOCTOR_UNITS)
def test_doctor_units_wait_for_ready_and_have_a_watchdog(name: str) -> None:
    """Type=notify with a watchdog: the doctor (core/sdnotify.py) says READY=1 and pings at
    half of WATCHDOG_USEC; only its own notifications count; a missed ping restarts it."""
    unit = parse_unit(SYSTEMD / name)
    assert value(unit, "Service", "Type") == "notify"
    assert value(unit, "Service", "NotifyAccess") == "main"  # never the server's
    watchdog = value(unit, "Service", "WatchdogSec")
    assert watchdog and watchdog.endswith("s")
    # pings every WatchdogSec/2: the loop may stall for seconds on a loaded host, not minutes
    assert 30 <= float(watchdog.rstrip("s")) <= 300
    assert value(unit, "Service", "Restart") in ("on-failure", "on-watchdog", "always")
    start = value(unit, "Service", "TimeoutStartSec")
    assert start and float(start.rstrip("s")) >= 90
    # the vLLM unit is not the doctor: it says nothing to systemd
    assert value(parse_unit(SYSTEMD / "vllm.service"), "Service", "Type") == "exec"
