"""``ascend-doctor profile`` against the simulated host: torch, msprof and auto."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from click.testing import CliRunner

from ascend_doctor.agent.profiling import MSPROF_KIND, TORCH_KIND
from ascend_doctor.cli.demo import free_port
from ascend_doctor.cli.profile import profile
from ascend_doctor.core.records import encode
from ascend_doctor.core.store import Store
from ascend_doctor.sim.host import SimHost
from ascend_doctor.sim.msprof import SLOW_KEY
from ascend_doctor.sim.state import update_state

pytestmark = pytest.mark.integration

QWEN7 = "Qwen/Qwen2.5-7B-Instruct"


class Server:
    """A fake ``vllm serve`` on a free port, healthy once constructed."""

    def __init__(self, host: SimHost, flags: list[str], env: dict[str, str]) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = host.serve_argv(QWEN7, ["--host", "127.0.0.1", "--port", str(port), *flags])
        self.log = host.root / f"server-{port}.out"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                argv,
                env={**os.environ, **host.env(), **env},
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(f"{self.url}/health", trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"fake server not healthy:\n{self.log.read_text()}")

    def npu_pid(self) -> int:
        """The process that runs on the card (the engine core with one rank): msprof's target."""
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            if child.cmdline()[:1] == ["VLLM::EngineCore"]:
                return child.pid
        raise AssertionError("no VLLM::EngineCore child")

    def close(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)  # the engine core too
        self.proc.wait()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> SimHost:
    # the newest release: --profiler-config (0.11 knows only VLLM_TORCH_PROFILER_DIR)
    return SimHost.create(
        tmp_path_factory.mktemp("profile") / "host", load_seconds=0.1, vllm_version="0.23"
    )


@pytest.fixture(scope="module")
def profiled(host: SimHost) -> Iterator[tuple[Server, Path]]:
    """A server with a torch profiler dir that also accepts msprof (PROFILING_MODE=dynamic)."""
    prof = host.root / "torch-prof"
    cfg = json.dumps({"profiler": "torch", "torch_profiler_dir": str(prof)})
    server = Server(host, ["--profiler-config", cfg], {"PROFILING_MODE": "dynamic"})
    yield server, prof
    server.close()


@pytest.fixture(scope="module")
def plain(host: SimHost) -> Iterator[Server]:
    """A server started with no profiling at all."""
    # Another card: the profiled server holds device 0.
    server = Server(host, [], {"ASCEND_RT_VISIBLE_DEVICES": "1"})
    yield server
    server.close()


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(profile, ["--duration", "1", "--timeout", "10", *args])
    return result.exit_code, result.output


def artifacts(state: Path) -> list[dict[str, object]]:
    store = Store.in_dir(state, readonly=True)
    try:
        return [encode(a) for a in store.artifacts()]
    finally:
        store.close()


def test_torch_mode_captures_and_records_the_ascend_pt_dir(
    profiled: tuple[Server, Path], tmp_path: Path
) -> None:
    server, prof = profiled
    state = tmp_path / "state"
    code, out = run(
        "--mode", "torch", "--url", server.url, "--profiler-dir", str(prof),
        "--state-dir", str(state),
    )  # fmt: skip
    assert code == 0, out
    (item,) = artifacts(state)
    top = Path(str(item["path"]))
    assert item["kind"] == TORCH_KIND
    assert top.name.endswith("_ascend_pt") and top.parent == prof.resolve()
    for name in ("kernel_details.csv", "operator_details.csv", "op_statistic.csv"):
        assert (top / "ASCEND_PROFILER_OUTPUT" / name).is_file()
    assert isinstance(item["size_bytes"], int) and item["size_bytes"] > 0
    started, ended = item["started_at"], item["ended_at"]
    assert isinstance(started, float) and isinstance(ended, float)
    assert ended - started >= 1.0
    assert str(top) in out
    # Analysed as it was captured: the summary is stored with it and printed.
    analysis = item["analysis"]
    assert isinstance(analysis, dict)
    assert str(analysis["headline"]).startswith("rank 0: captured NPU time")
    assert analysis["headline"] in out and "top operators" in str(analysis["report"])


def test_msprof_mode_attaches_to_a_dynamic_server(
    profiled: tuple[Server, Path], host: SimHost, tmp_path: Path
) -> None:
    server, _ = profiled
    state = tmp_path / "state"
    code, out = run(
        "--mode", "msprof", "--pid", str(server.npu_pid()),
        "--msprof", str(host.bin_dir / "msprof"), "--state-dir", str(state),
    )  # fmt: skip
    assert code == 0, out
    (item,) = artifacts(state)
    top = Path(str(item["path"]))
    assert item["kind"] == MSPROF_KIND
    assert top.parent == (state / "profiles").resolve() and top.name.startswith("PROF_")
    files = {p.name.rsplit("_", 1)[0] for p in (top / "mindstudio_profiler_output").iterdir()}
    assert files == {"msprof", "op_summary", "op_statistic"}


def test_auto_picks_torch_when_start_profile_answers(
    profiled: tuple[Server, Path], host: SimHost, tmp_path: Path
) -> None:
    server, prof = profiled
    state, out_dir = tmp_path / "state", tmp_path / "copy"
    code, out = run(
        "--url", server.url, "--profiler-dir", str(prof), "--pid", str(server.npu_pid()),
        "--msprof", str(host.bin_dir / "msprof"), "-o", str(out_dir), "--state-dir", str(state),
    )  # fmt: skip
    assert code == 0, out
    assert "start_profile answered" in out
    (item,) = artifacts(state)
    assert item["kind"] == TORCH_KIND
    assert Path(str(item["path"])).parent == out_dir.resolve()


def test_auto_explains_why_nothing_is_available(plain: Server, tmp_path: Path) -> None:
    code, out = run("--url", plain.url, "--profiler-dir", str(tmp_path / "prof"))
    assert code != 0
    assert "start_profile is 404" in out and "no --pid given" in out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1


def test_msprof_mode_refusal_is_one_line(plain: Server, host: SimHost) -> None:
    code, out = run(
        "--mode", "msprof", "--pid", str(plain.npu_pid()), "--msprof", str(host.bin_dir / "msprof")
    )
    assert code != 0
    assert "PROFILING_MODE=dynamic" in out and len(out.strip().splitlines()) == 1


def test_torch_mode_needs_profiler_dir_and_a_route(plain: Server, tmp_path: Path) -> None:
    code, out = run("--mode", "torch", "--url", plain.url)
    assert code != 0 and "--profiler-dir" in out
    code, out = run("--mode", "torch", "--url", plain.url, "--profiler-dir", str(tmp_path))
    assert code != 0 and "404" in out and "--profiler-config" in out


def test_a_capture_of_a_tp2_server_names_the_slow_rank(host: SimHost, tmp_path: Path) -> None:
    prof = tmp_path / "tp2-prof"
    cfg = json.dumps({"profiler": "torch", "torch_profiler_dir": str(prof)})
    env = {"ASCEND_RT_VISIBLE_DEVICES": "4,5"}
    server = Server(host, ["--tensor-parallel-size", "2", "--profiler-config", cfg], env)
    try:
        with update_state(host.state_path) as state:
            state[SLOW_KEY] = {"rank": 1, "part": "collective", "factor": 5.0}
        state_dir = tmp_path / "state"
        code, out = run(
            "--mode", "torch", "--url", server.url, "--profiler-dir", str(prof),
            "--state-dir", str(state_dir), "--no-advisor",
        )  # fmt: skip
    finally:
        with update_state(host.state_path) as state:
            state.pop(SLOW_KEY, None)
        server.close()
    assert code == 0, out
    assert len(list(prof.glob("*_ascend_pt"))) == 2
    (item,) = artifacts(state_dir)
    analysis = item["analysis"]
    assert isinstance(analysis, dict) and analysis["slow_rank"] == 1
    assert "rank 1 is the slow rank" in str(analysis["headline"])
    assert "hcom_allReduce" in out and "<- slow" in out


def test_a_stuck_engine_is_not_profiled(tmp_path: Path) -> None:
    """/start_profile waits on the engine's busy loop: a stuck step would hang the capture."""
    stuck_host = SimHost.create(tmp_path / "host", load_seconds=0.1, vllm_version="0.23")
    stuck_host.set_quirk("hang", "once")
    prof = tmp_path / "prof"
    cfg = json.dumps({"profiler": "torch", "torch_profiler_dir": str(prof)})
    server = Server(stuck_host, ["--profiler-config", cfg], {})
    try:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{server.url}/v1/completions", json={"prompt": "x"}, timeout=0.5)
        started = time.monotonic()
        code, out = run("--mode", "torch", "--url", server.url, "--profiler-dir", str(prof))
        assert code != 0
        assert "generated no token" in out and "stuck step" in out
        assert time.monotonic() - started < 10
        assert not prof.exists() or not list(prof.glob("*_ascend_pt"))
    finally:
        server.close()
