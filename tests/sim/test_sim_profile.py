"""Profiling on the simulated host: vLLM's profile routes and the fake msprof."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from simhost_support import ServerRun

from ascend_doctor.sim.host import SimHost

QWEN7 = "Qwen/Qwen2.5-7B-Instruct"
Serve = Callable[..., ServerRun]


def _torch_config(path: Path) -> list[str]:
    return ["--profiler-config", json.dumps({"profiler": "torch", "torch_profiler_dir": str(path)})]


def _msprof(host: SimHost, pid: int, out: Path, stdin: str) -> subprocess.CompletedProcess[str]:
    argv = [str(host.bin_dir / "msprof"), "--dynamic=on", f"--pid={pid}", f"--output={out}"]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=20)


def test_profile_routes_are_404_without_profiler_config(serve: Serve) -> None:
    run = serve(QWEN7, version="0.23")
    run.wait_healthy()
    assert run.client.post(f"{run.base}/start_profile").status_code == 404
    assert run.client.post(f"{run.base}/stop_profile").status_code == 404
    assert "Route: /start_profile" not in run.output()


def test_stop_profile_writes_an_ascend_pt_tree(serve: Serve, tmp_path: Path) -> None:
    prof = tmp_path / "prof"
    run = serve(QWEN7, _torch_config(prof), version="0.13")
    run.wait_healthy()
    assert run.client.post(f"{run.base}/start_profile").status_code == 200
    assert run.client.post(f"{run.base}/stop_profile", timeout=10).status_code == 200
    # torch_npu's profiler runs where the card is: the engine core with one rank
    (top,) = prof.glob(f"*_{run.engine_pid()}_*_ascend_pt")
    out = top / "ASCEND_PROFILER_OUTPUT"
    kernels = (out / "kernel_details.csv").read_text().splitlines()
    assert kernels[0].startswith("Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,")
    assert len(kernels) > 1
    assert (out / "op_statistic.csv").read_text().startswith("Device_id,OP Type,Core Type,Count")
    assert (out / "operator_details.csv").read_text().startswith("Name,Input Shapes,Call Stack")
    assert any(e.get("ph") == "X" for e in json.loads((out / "trace_view.json").read_text()))
    text = run.output()
    for line in ("Profiler with mode 'torch' is enabled", "Route: /start_profile, Methods: POST"):
        assert line in text
    assert text.index("Starting profiler...") < text.index("Profiler stopped.")


def test_old_env_enables_profile_routes_up_to_0_13(serve: Serve, tmp_path: Path) -> None:
    run = serve(QWEN7, env={"VLLM_TORCH_PROFILER_DIR": str(tmp_path / "old")}, version="0.11")
    run.wait_healthy()
    assert run.client.post(f"{run.base}/start_profile").status_code == 200
    assert run.client.post(f"{run.base}/stop_profile", timeout=10).status_code == 200
    assert len(list((tmp_path / "old").glob("*_ascend_pt"))) == 1
    assert "Torch Profiler is enabled in the API server." in run.output()


def test_0_13_warns_about_the_env_and_0_18_ignores_it(serve: Serve, tmp_path: Path) -> None:
    env = {"VLLM_TORCH_PROFILER_DIR": str(tmp_path / "old")}
    mid = serve(QWEN7, env=env, version="0.13")
    mid.wait_healthy()
    assert "Using VLLM_TORCH_PROFILER_DIR environment variable is deprecated" in mid.output()
    assert mid.client.post(f"{mid.base}/start_profile").status_code == 200
    new = serve(QWEN7, env={**env, "ASCEND_RT_VISIBLE_DEVICES": "1"}, version="0.18")
    new.wait_healthy()
    assert new.client.post(f"{new.base}/start_profile").status_code == 404


def test_msprof_attaches_to_a_dynamic_server(serve: Serve, host: SimHost, tmp_path: Path) -> None:
    run = serve(QWEN7, env={"PROFILING_MODE": "dynamic"})
    run.wait_healthy()
    # msprof attaches to the process that runs on the NPU, not to the API server
    refused = _msprof(host, run.proc.pid, tmp_path / "api", "start\n")
    assert refused.returncode != 0
    done = _msprof(host, run.engine_pid(), tmp_path / "out", "start\nstop\nquit\n")
    assert done.returncode == 0, done.stdout
    assert "Enter 'start'" in done.stdout
    (top,) = (tmp_path / "out").glob("PROF_*")
    names = sorted(p.name.rsplit("_", 1)[0] for p in (top / "mindstudio_profiler_output").iterdir())
    assert names == ["msprof", "op_statistic", "op_summary"]
    summary = next((top / "mindstudio_profiler_output").glob("op_summary_*.csv")).read_text()
    assert summary.startswith("Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,")


def test_msprof_refuses_a_server_without_dynamic_mode(
    serve: Serve, host: SimHost, tmp_path: Path
) -> None:
    run = serve(QWEN7)
    run.wait_healthy()
    done = _msprof(host, run.engine_pid(), tmp_path / "out", "start\n")
    assert done.returncode != 0
    assert "PROFILING_MODE=dynamic" in done.stdout
    assert not (tmp_path / "out").exists()


def test_msprof_refuses_a_missing_pid(host: SimHost, tmp_path: Path) -> None:
    done = _msprof(host, 2**22 + 7, tmp_path / "out", "start\n")
    assert done.returncode != 0
    assert "does not exist" in done.stdout
