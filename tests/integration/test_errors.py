"""Bad input gets a one-line error or a recorded failure: never a traceback, never a hang."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_doctor.agent.daemon import Daemon
from ascend_doctor.core.config import Config, NpuSmiConfig, load_config
from ascend_doctor.core.store import Store
from ascend_doctor.rules import load_rules
from ascend_doctor.sim.host import SimHost
from tests.conftest import wait_for

pytestmark = pytest.mark.integration


def doctor(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ascend_doctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_bad_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "doctor.toml"
    cfg.write_text('[remediation]\nmode = "yolo"\n')
    err = one_line_error(doctor("watch", "--config", str(cfg), "--", "true"))
    assert f"{cfg}:2: config 'remediation.mode' is 'yolo': expected one of" in err


def test_bad_config_file_in_demo(tmp_path: Path) -> None:
    cfg = tmp_path / "doctor.toml"
    cfg.write_text("[server]\nstart_timeout = -1\n")
    err = one_line_error(doctor("demo", "--config", str(cfg)))
    assert "config 'server.start_timeout' is -1: expected a positive number" in err


def test_unknown_scenario() -> None:
    err = one_line_error(doctor("demo", "--scenario", "meteor-strike"))
    assert "unknown scenario 'meteor-strike'; known: " in err
    assert "kv-cache" in err


def test_command_that_does_not_exist(tmp_path: Path) -> None:
    err = one_line_error(
        doctor("watch", "--state-dir", str(tmp_path), "--", "/nonexistent/vllm", "serve", "m")
    )
    assert err == "Error: command not found: /nonexistent/vllm"


def test_incidents_without_a_store(tmp_path: Path) -> None:
    err = one_line_error(doctor("incidents", "--state-dir", str(tmp_path / "none")))
    assert "no store here" in err


def test_help_and_version() -> None:
    assert doctor("--version").stdout.startswith("ascend-doctor, version ")
    for cmd in ("watch", "demo", "incidents"):
        out = doctor(cmd, "--help")
        assert out.returncode == 0 and "Usage:" in out.stdout


def test_list_scenarios() -> None:
    out = doctor("demo", "--list")
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert {"kv-cache", "npu-oom", "device-fault"} <= set(names)


async def test_hung_npu_smi_is_killed_and_counted(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host")
    host.set_npu_smi_mode("hang")
    config = Config(
        collectors=Config().collectors.__class__(
            npu_smi=NpuSmiConfig(path=str(host.bin_dir / "npu-smi"), interval=0.1, timeout=0.3)
        )
    )
    daemon = Daemon(config, tmp_path / "state", None, load_rules(), base_env=dict(os.environ))
    run = asyncio.create_task(daemon.run())
    await wait_for(lambda: daemon.collector_failures["npu_smi"] >= 2, timeout=15, what="timeouts")
    daemon.shutdown()
    assert await asyncio.wait_for(run, 10) == 0
    store = Store.in_dir(tmp_path / "state", readonly=True)
    assert store.latest_samples("npu_smi") == {}
    recorded = store.collectors()["npu_smi"]
    store.close()
    assert recorded.failures >= 2
    assert recorded.last_error == "npu-smi info timed out after 0.3s; killed"


def test_example_config_loads() -> None:
    example = Path(__file__).parents[2] / "docs" / "ascend-doctor.example.toml"
    config = load_config(example)
    assert config.remediation.allow_device_reset is False
