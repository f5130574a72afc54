"""A fake worker process (``VLLM::Worker_TPn``): vLLM's WorkerProc around one NPUWorker.

It answers the engine core's calls one at a time; an exception is printed here with this
process's prefix (``WorkerProc hit an exception.`` / ``WorkerProc failed to start.``) and sent
back as a failed call (vllm/v1/executor/multiproc_executor.py ``worker_busy_loop``).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

from ascend_doctor.sim.engine_core import ServeConfig
from ascend_doctor.sim.ipc import Channel, inherited
from ascend_doctor.sim.state import state_path_from_env
from ascend_doctor.sim.versions import get_profile
from ascend_doctor.sim.vlog import Plog, VllmOut, log_root_from_env
from ascend_doctor.sim.worker import Worker, WorkerError


def process_name(cfg: ServeConfig, rank: int) -> str:
    """vLLM's worker name: ``Worker``, with ``_TPn`` when there is more than one rank."""
    return f"Worker_TP{rank}" if cfg.tensor_parallel_size > 1 else "Worker"


def _serve(ch: Channel, worker: Worker, out: VllmOut, dynamic: bool) -> None:
    while (msg := ch.recv()) is not None:
        op = msg.get("op")
        if op == "shutdown":
            return
        try:
            result = _dispatch(worker, op, msg, dynamic)
        except WorkerError as exc:
            head = "WorkerProc failed to start." if exc.at_start else "WorkerProc hit an exception."
            out.log("ERROR", "multiproc_executor.py:671", f"{head}\n{exc.frames}\n{exc.text}")
            ch.send({"ok": False, "error": exc.text, "at_start": exc.at_start})
            continue
        ch.send({"ok": True, "result": result})


def _dispatch(worker: Worker, op: Any, msg: dict[str, Any], dynamic: bool) -> Any:
    if op == "init_device":
        worker.init_device(dynamic)
        threading.Thread(target=worker.watch_faults, daemon=True, name="faults").start()
        return None
    if op == "load_model":
        worker.load_model()
        return None
    if op == "determine_available_memory":
        worker.determine_available_memory()
        assert worker.plan is not None
        return asdict(worker.plan)
    if op == "capture":
        worker.capture()
        return None
    if op == "execute":
        return worker.execute(int(msg["prompt_tokens"]), int(msg["max_tokens"]))
    if op == "check_fault":
        return worker.check_fault()
    if op == "profile":
        root = msg.get("root")
        worker.profile(bool(msg.get("start")), Path(root) if root else None)
        return None
    raise ValueError(f"unknown worker call {op!r}")


def main() -> int:
    """Entry point of a worker process."""
    ch = inherited()
    init = ch.recv()
    if init is None:
        return 1
    cfg = ServeConfig.from_json(init["cfg"])
    rank = int(init["rank"])
    version = get_profile(init["version"])
    import setproctitle

    name = process_name(cfg, rank)
    setproctitle.setproctitle(f"VLLM::{name}")
    pid = os.getpid()
    out = VllmOut(name, pid, colored=version.prefix_always_colored)
    device = cfg.devices[rank] if rank < len(cfg.devices) else 0
    try:
        state_path: Path | None = state_path_from_env()
    except FileNotFoundError:
        state_path = None
    worker = Worker(
        cfg, rank, version, out, Plog(log_root_from_env(), pid, [device]), state_path, pid
    )
    atexit.register(worker.release)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        worker.stop.set()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        _serve(ch, worker, out, bool(init.get("dynamic")))
    except SystemExit:
        pass
    finally:
        worker.stop.set()
        worker.hang_in_driver()
        worker.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
