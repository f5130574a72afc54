"""The fake server's process model: API server, engine core, workers, and who holds a card."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
from simhost_support import ServerRun

from ascend_doctor.sim.host import SimHost

QWEN7 = "Qwen/Qwen2.5-7B-Instruct"
Serve = Callable[..., ServerRun]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def holders(host: SimHost) -> dict[int, list[int]]:
    """device -> pids that npu-smi lists on it."""
    out: dict[int, list[int]] = {}
    for p in json.loads(host.state_path.read_text())["processes"]:
        out.setdefault(p["device"], []).append(p["pid"])
    return out


def test_engine_core_holds_the_card_with_one_rank(serve: Serve, host: SimHost) -> None:
    run = serve(QWEN7, env={"ASCEND_RT_VISIBLE_DEVICES": "2"})
    run.wait_healthy()
    engine = run.engine_pid()
    assert engine != run.proc.pid
    assert psutil.Process(engine).ppid() == run.proc.pid
    assert holders(host) == {2: [engine]}
    table = subprocess.run(
        ["npu-smi", "info"], env={"PATH": host.env()["PATH"]}, capture_output=True, text=True
    ).stdout
    assert f"| 2       0                 | {engine:<14}| VLLM::EngineCor" in table
    out = ANSI.sub("", run.output())
    assert f"(EngineCore_DP0 pid={engine}) INFO" in out
    assert f"(APIServer pid={run.proc.pid}) INFO" in out


def test_workers_hold_the_cards_with_tensor_parallelism(serve: Serve, host: SimHost) -> None:
    run = serve(QWEN7, ["-tp", "2"], {"ASCEND_RT_VISIBLE_DEVICES": "4,5"}, version="0.23")
    run.wait_healthy()
    engine = run.engine_pid()
    workers = {p.cmdline()[0]: p.pid for p in psutil.Process(engine).children()}
    assert set(workers) == {"VLLM::Worker_TP0", "VLLM::Worker_TP1"}
    assert holders(host) == {4: [workers["VLLM::Worker_TP0"]], 5: [workers["VLLM::Worker_TP1"]]}
    out = run.output()
    assert f"(Worker_TP1 pid={workers['VLLM::Worker_TP1']}) INFO" in out
    assert f"(EngineCore pid={engine}) INFO" in out
    plogs = sorted(p.name.split("_")[0] for p in (host.log_root / "debug" / "plog").glob("*.log"))
    assert plogs == []  # CANN writes a plog at a process's first ERROR line, none yet
    done = run.client.post(f"{run.base}/v1/completions", json={"prompt": "a b", "max_tokens": 2})
    assert done.status_code == 200


def test_heartbeat_loss_real_wording_and_a_plog_per_process(serve: Serve, host: SimHost) -> None:
    run = serve(QWEN7, [], {"ASCEND_RT_VISIBLE_DEVICES": "3"})
    run.wait_healthy()
    engine = run.engine_pid()
    host.inject(3, "heartbeat_lost")
    assert run.wait() == 0
    out = ANSI.sub("", run.output()).replace("\r", "")
    assert "error code is 507010" in out
    assert "[Error]: The task scheduler loses the heartbeat. " in out
    assert "Device[3] lost heartbeat.[FUNC:SyncTask][FILE:direct_hwts_engine.cc][LINE:407]" in out
    assert out.index("EngineCore encountered a fatal error.") < out.index("EngineDeadError")
    (plog,) = (host.log_root / "debug" / "plog").glob("plog-*.log")
    assert plog.name.startswith(f"plog-{engine}_")
    assert f"[ERROR] RUNTIME({engine},python3):" in plog.read_text()
    assert "SyncTask:Device[3] lost heartbeat." in plog.read_text()
    kernel = host.kernel_log.read_text()
    assert "[drv_soft_fault] [heart_beat_judge 318]" in kernel
    assert "Heartbeat lost! (device=3;" in kernel


def test_a_holder_stuck_in_the_driver_keeps_the_card(serve: Serve, host: SimHost) -> None:
    host.set_setting("driver_hang_seconds", 6.5)
    run = serve(QWEN7, [], {"ASCEND_RT_VISIBLE_DEVICES": "3"})
    run.wait_healthy()
    engine = run.engine_pid()
    host.inject(3, "heartbeat_lost")
    time.sleep(1.0)
    assert psutil.pid_exists(engine)  # the engine core died of it, but cannot exit
    # the API server gives its engine core 5 s after SIGTERM, then SIGKILLs it, and exits 0
    assert run.wait(timeout=15) == 0
    listed = subprocess.run(
        ["npu-smi", "info"], env={"PATH": host.env()["PATH"]}, capture_output=True, text=True
    ).stdout
    assert f"| 3       0                 | {engine:<14}|" in listed  # still holding the card
    deadline = time.monotonic() + 10
    while holders(host) and time.monotonic() < deadline:
        subprocess.run(["npu-smi", "info"], env={"PATH": host.env()["PATH"]}, capture_output=True)
        time.sleep(0.2)
    assert holders(host) == {}  # let go once the driver call returned


def test_profile_calls_block_while_the_engine_is_stuck(
    serve: Serve, host: SimHost, tmp_path: Path
) -> None:
    host.set_quirk("hang", "once")
    prof = tmp_path / "prof"
    run = serve(QWEN7, env={"VLLM_TORCH_PROFILER_DIR": str(prof)}, version="0.11")
    run.wait_healthy()
    slow = httpx.Client(trust_env=False, timeout=1.0)
    try:
        try:
            slow.post(f"{run.base}/v1/completions", json={"prompt": "x y", "max_tokens": 4})
        except httpx.TimeoutException:
            pass  # the step never finishes
        t0 = time.monotonic()
        try:
            slow.post(f"{run.base}/start_profile")
            answered = True
        except httpx.TimeoutException:
            answered = False
        assert not answered and time.monotonic() - t0 >= 0.9
        assert slow.get(f"{run.base}/health").status_code == 200  # /health does not see it
    finally:
        slow.close()


def test_stop_profile_takes_the_parse_time(serve: Serve, host: SimHost, tmp_path: Path) -> None:
    host.set_setting("profile_parse_seconds", 1.0)
    prof = tmp_path / "prof"
    config = json.dumps({"profiler": "torch", "torch_profiler_dir": str(prof)})
    run = serve(QWEN7, ["--profiler-config", config], version="0.23")
    run.wait_healthy()
    assert run.client.post(f"{run.base}/start_profile").status_code == 200
    t0 = time.monotonic()
    with httpx.Client(trust_env=False, timeout=10) as c:
        assert c.post(f"{run.base}/stop_profile").status_code == 200
    assert time.monotonic() - t0 >= 1.0
    (top,) = prof.glob(f"*_{run.engine_pid()}_*_ascend_pt")  # written by the card's process
    assert (top / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").exists()
