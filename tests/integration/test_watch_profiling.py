"""watch with [profiling]: the server starts with a profiler, and `profile --state-dir`
finds it (torch and msprof) without being told where; capture_profile records one too."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from ascend_doctor.agent.daemon import Daemon
from ascend_doctor.cli.demo import free_port
from ascend_doctor.core.config import (
    CollectorsConfig,
    Config,
    NpuSmiConfig,
    ProfilingConfig,
    ServerConfig,
)
from ascend_doctor.core.events import ProcessState
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.rules import load_rules
from ascend_doctor.sim.host import SimHost
from tests.conftest import read_store, wait_for

pytestmark = pytest.mark.integration


async def profile_cli(state: Path, env: dict[str, str], *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ascend_doctor",
        "profile",
        "--state-dir",
        str(state),
        "--duration",
        "0.5",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.parametrize("version", ["0.11", "0.23"])
async def test_profiling_end_to_end(tmp_path: Path, version: str) -> None:
    host = SimHost.create(tmp_path / "host", load_seconds=0.1, vllm_version=version)
    state = tmp_path / "state"
    port = free_port()
    config = Config(
        server=ServerConfig(echo=False, start_timeout=60),
        collectors=CollectorsConfig(npu_smi=NpuSmiConfig(path=str(host.bin_dir / "npu-smi"))),
        profiling=ProfilingConfig(enabled=True, msprof=True, capture_seconds=0.5),
    )
    argv = host.serve_argv("Qwen/Qwen2.5-7B-Instruct", ["--host", "127.0.0.1", "--port", str(port)])
    daemon = Daemon(config, state, LaunchSpec(tuple(argv), host.env()), load_rules())
    run = asyncio.create_task(daemon.run())
    try:
        sup = daemon.supervisor
        assert sup is not None
        await wait_for(lambda: sup.state == ProcessState.RUNNING, 60, "the server")
        spec = daemon.effective_spec()
        learned = read_store(state, lambda s: s.server_version())
        assert learned is not None and learned.vllm == f"{version}.0"
        if version == "0.11":  # --profiler-config would be an unknown flag: exit 2
            assert spec.flag("--profiler-config") is None
            assert spec.env["VLLM_TORCH_PROFILER_DIR"] == str(state / "profiles/torch")
        else:  # 0.18 ignores the variable: only the flag switches the profiler on
            profiler = json.loads(spec.flag("--profiler-config") or "{}")
            assert profiler == {
                "profiler": "torch",
                "torch_profiler_dir": str(state / "profiles/torch"),
            }
        assert spec.env["PROFILING_MODE"] == "dynamic"

        env = {**os.environ, **host.env()}
        await profile_cli(state, env)  # auto: torch, dir and URL from the state dir
        await profile_cli(state, env, "--mode", "msprof")  # pid from the state dir
        captured = await daemon.profiler.capture()  # what the capture_profile action runs
        assert Path(captured.path).name.endswith("_ascend_pt")

        kinds = [a.kind for a in read_store(state, lambda s: s.artifacts())]
        assert kinds == ["torch_profile", "msprof_profile", "torch_profile"]
        for a in read_store(state, lambda s: s.artifacts()):
            assert Path(a.path).is_dir() and a.size_bytes > 0
    finally:
        daemon.shutdown()
        await asyncio.wait_for(run, 30)
