"""The fake engine core process (``VLLM::EngineCore``): vLLM's EngineCoreProc.

Started by the fake API server, it builds its executor (the worker in-process with one card, or
one worker process per rank), sizes the KV cache, then runs the busy loop: one step at a time,
utility calls such as ``profile`` only between steps, so a stuck step stalls them too
(vllm/v1/engine/core.py). A worker's exception kills the engine: it prints the error, tells the
API server, and exits; a worker stuck in the driver keeps its card even then.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from ascend_doctor.sim import vllm_text as txt
from ascend_doctor.sim.engine_core import ServeConfig
from ascend_doctor.sim.executor import Executor, make_executor
from ascend_doctor.sim.ipc import Channel, inherited
from ascend_doctor.sim.models import MemoryPlan
from ascend_doctor.sim.state import state_path_from_env, take_quirk
from ascend_doctor.sim.versions import VersionProfile, get_profile
from ascend_doctor.sim.vlog import VllmOut
from ascend_doctor.sim.worker import WorkerError


class EngineCore:
    """The engine core of one server run."""

    def __init__(self, ch: Channel, init: dict[str, Any]) -> None:
        self.ch = ch
        self.cfg = ServeConfig.from_json(init["cfg"])
        self.version: VersionProfile = get_profile(init["version"])
        self.pid = os.getpid()
        self.out = VllmOut(
            self.version.engine_name, self.pid, colored=self.version.prefix_always_colored
        )
        profiler = init.get("profiler_dir")
        self.profiler_dir = Path(profiler) if profiler else None
        try:
            state_path: Path | None = state_path_from_env()
        except FileNotFoundError:
            state_path = None
        self.state_path = state_path
        self.frozen = False  # the busy loop is stuck: no stats leave it either
        self.executor: Executor = make_executor(
            self.cfg, self.version, self.out, state_path, bool(init.get("dynamic"))
        )
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.running = 0
        self.active_tokens = 0
        self.capacity = 1
        self.closing = threading.Event()

    # -- start-up ------------------------------------------------------------------------
    def start(self) -> bool:
        """Initialise the executor and the KV cache; False (after saying why) on failure."""
        cfg = self.cfg
        self.out.log(
            "INFO",
            "core.py:77",
            f"Initializing a V1 LLM engine (v{self.version.vllm}) with config: "
            f"model='{cfg.model}', max_seq_len={cfg.max_model_len}, "
            f"tensor_parallel_size={cfg.tensor_parallel_size}, device_config=npu, "
            f"enforce_eager={cfg.enforce_eager}",
        )
        t0 = time.monotonic()
        try:
            self.executor.init_device()
            self.executor.load_model()
            plan = self.executor.determine_available_memory()
            self._check_kv_cache(plan)
            self.executor.capture()
        except WorkerError as exc:
            self.out.log(
                "ERROR", "core.py:708", f"EngineCore failed to start.\n{exc.frames}\n{exc.text}"
            )
            failed = f"{{'{self.version.engine_name}': 1}}"
            self.ch.send({"ev": "init_failed", "failed": failed})
            return False
        self.out.log(
            "INFO",
            "core.py:210",
            "init engine (profile, create kv cache, warmup model) took "
            f"{time.monotonic() - t0:.2f} seconds",
        )
        self.ch.send({"ev": "ready", "num_gpu_blocks": plan.num_gpu_blocks})
        return True

    def _check_kv_cache(self, plan: MemoryPlan) -> None:
        cfg = self.cfg
        if plan.available_bytes <= 0:
            raise WorkerError(txt.KV_FRAMES, txt.no_cache_memory_error(self.version), at_start=True)
        if plan.needed_bytes(cfg.max_model_len) > plan.available_bytes:
            raise WorkerError(
                txt.KV_FRAMES,
                txt.kv_cache_error(plan, cfg.max_model_len, self.version),
                at_start=True,
            )
        self.capacity = max(1, plan.capacity_tokens)
        self.out.log(
            "INFO", "kv_cache_utils.py:1087", f"GPU KV cache size: {plan.capacity_tokens:,} tokens"
        )
        self.out.log(
            "INFO",
            "kv_cache_utils.py:1091",
            f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: "
            f"{plan.capacity_tokens / cfg.max_model_len:.2f}x",
        )

    # -- the busy loop -------------------------------------------------------------------
    def _read(self) -> None:
        while (msg := self.ch.recv()) is not None:
            self.inbox.put(msg)
        self.inbox.put({"op": "shutdown"})

    def _stats(self) -> None:
        while not self.closing.wait(0.25):
            if not self.frozen:
                self._send_stats()

    def _send_stats(self) -> None:
        waiting = sum(1 for m in list(self.inbox.queue) if m.get("op") == "add")
        self.ch.send(
            {
                "ev": "stats",
                "running": self.running,
                "waiting": waiting,
                "kv_usage": min(1.0, self.active_tokens / self.capacity),
            }
        )

    def run(self) -> int:
        """Serve until shutdown (0) or a fatal error (1)."""
        threading.Thread(target=self._read, daemon=True, name="input").start()
        threading.Thread(target=self._stats, daemon=True, name="stats").start()
        while True:
            try:
                msg = self.inbox.get(timeout=0.2)
            except queue.Empty:
                fault = self.executor.check_fault()
                if fault is not None:
                    return self._die(txt.EXECUTE_FRAMES, fault)
                continue
            op = msg.get("op")
            if op == "shutdown":
                return 0
            if op == "utility":
                self.executor.profile(bool(msg.get("is_start")), self.profiler_dir)
                self.ch.send({"ev": "utility_done", "cid": msg.get("cid")})
                continue
            if op == "add" and self.state_path is not None:
                if take_quirk(self.state_path, "stuck") == "once":
                    self._stick()
            if op == "add":
                rc = self._step(msg)
                if rc is not None:
                    return rc

    def _step(self, msg: dict[str, Any]) -> int | None:
        prompt, max_tokens = int(msg["prompt_tokens"]), int(msg["max_tokens"])
        self.running += 1
        self.active_tokens += prompt + max_tokens
        self._send_stats()
        started = time.time()
        try:
            ttft = self.executor.execute(prompt, max_tokens)
        except WorkerError as exc:
            return self._die(exc.frames, exc.text)
        finally:
            self.running -= 1
            self.active_tokens -= prompt + max_tokens
        self.ch.send(
            {
                "ev": "done",
                "rid": msg["rid"],
                "prompt_tokens": prompt,
                "gen_tokens": max_tokens,
                "ttft": ttft,
                "e2e": time.time() - started,
            }
        )
        self._send_stats()
        return None

    def _stick(self) -> None:
        """The busy loop sticks before it schedules the request (a deadlock in the input
        path): nothing runs, nothing is logged, the scheduler's stats stop where they were
        (Running: 0), and /health still answers 200, since V1's check_health only reports an
        engine that died (vllm-project/vllm#17972). Only SIGTERM ends it."""
        self.frozen = True
        threading.Event().wait()

    def _die(self, frames: str, text: str) -> int:
        self.out.log(
            "ERROR", "core.py:710", f"EngineCore encountered a fatal error.\n{frames}\n{text}"
        )
        self.ch.send({"ev": "dead"})
        return 1

    def close(self) -> None:
        """Stop the stats thread and the executor (a worker stuck in the driver lingers)."""
        self.closing.set()
        self.executor.shutdown()


def main() -> int:
    """Entry point of the engine core process."""
    ch = inherited()
    init = ch.recv()
    if init is None:
        return 1
    import setproctitle

    setproctitle.setproctitle("VLLM::EngineCore")
    core = EngineCore(ch, init)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # vLLM's engine core turns SIGTERM/SIGINT into SystemExit (core.py signal_handler).
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rc = 1
    try:
        rc = core.run() if core.start() else 1
    except SystemExit:
        rc = 0
    finally:
        core.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
