"""How the engine core reaches its workers: in-process (one card) or one process per rank.

vLLM picks ``UniProcExecutor`` when the world size is 1 and ``MultiprocExecutor`` otherwise
(``--distributed-executor-backend`` overrides it; vllm/config/parallel.py). With ``mp`` every
rank is a ``VLLM::Worker[_TPn]`` process: it prints its own exceptions (``WorkerProc hit an
exception.``) and the engine core reports ``Worker failed with error '...'``
(vllm/v1/executor/multiproc_executor.py).
"""

from __future__ import annotations

import atexit
import os
import subprocess
import threading
from pathlib import Path
from typing import Any, Protocol

from ascend_doctor.sim import vllm_text as txt
from ascend_doctor.sim.engine_core import ServeConfig
from ascend_doctor.sim.ipc import Channel, spawn
from ascend_doctor.sim.models import MemoryPlan
from ascend_doctor.sim.versions import VersionProfile
from ascend_doctor.sim.vlog import Plog, VllmOut, log_root_from_env
from ascend_doctor.sim.worker import Worker, WorkerError


class Executor(Protocol):
    """What the engine core asks of its workers."""

    def init_device(self) -> None: ...
    def load_model(self) -> None: ...
    def determine_available_memory(self) -> MemoryPlan: ...
    def capture(self) -> None: ...
    def execute(self, prompt_tokens: int, max_tokens: int) -> float: ...
    def check_fault(self) -> str | None: ...
    def profile(self, start: bool, root: Path | None) -> None: ...
    def shutdown(self) -> None: ...


class UniProcExecutor:
    """The worker runs in the engine core process, which therefore holds the card."""

    def __init__(
        self,
        cfg: ServeConfig,
        version: VersionProfile,
        out: VllmOut,
        state_path: Path | None,
        dynamic: bool,
    ) -> None:
        pid = os.getpid()
        plog = Plog(log_root_from_env(), pid, cfg.devices[:1])
        self.worker = Worker(cfg, 0, version, out, plog, state_path, pid)
        self.dynamic = dynamic
        atexit.register(self.worker.release)

    def init_device(self) -> None:
        self.worker.init_device(self.dynamic)
        threading.Thread(target=self.worker.watch_faults, daemon=True, name="faults").start()

    def load_model(self) -> None:
        self.worker.load_model()

    def determine_available_memory(self) -> MemoryPlan:
        self.worker.determine_available_memory()
        assert self.worker.plan is not None
        return self.worker.plan

    def capture(self) -> None:
        self.worker.capture()

    def execute(self, prompt_tokens: int, max_tokens: int) -> float:
        return self.worker.execute(prompt_tokens, max_tokens)

    def check_fault(self) -> str | None:
        return self.worker.check_fault()

    def profile(self, start: bool, root: Path | None) -> None:
        self.worker.profile(start, root)

    def shutdown(self) -> None:
        self.worker.stop.set()
        self.worker.hang_in_driver()
        self.worker.release()


class MultiprocExecutor:
    """One worker process per rank, driven over a channel each."""

    def __init__(
        self,
        cfg: ServeConfig,
        version: VersionProfile,
        out: VllmOut,
        state_path: Path | None,
        dynamic: bool,
    ) -> None:
        self.out = out
        self.procs: list[subprocess.Popen[bytes]] = []
        self.chans: list[Channel] = []
        for rank in range(cfg.tensor_parallel_size):
            proc, ch = spawn("ascend_doctor.sim.worker_proc", [])
            ch.send(
                {"cfg": cfg.to_json(), "rank": rank, "version": version.line, "dynamic": dynamic}
            )
            self.procs.append(proc)
            self.chans.append(ch)
        self.plan: MemoryPlan | None = None

    def _call(self, op: str, **kwargs: Any) -> list[Any]:
        for ch in self.chans:
            if not ch.send({"op": op, **kwargs}):
                raise WorkerError(txt.EXECUTE_FRAMES, "RuntimeError: a worker process died")
        results = []
        for ch in self.chans:
            reply = ch.recv()
            if reply is None:
                raise WorkerError(txt.EXECUTE_FRAMES, "RuntimeError: a worker process died")
            if not reply.get("ok"):
                err = str(reply.get("error", "")).split("\n", 1)[0].removeprefix("RuntimeError: ")
                raise WorkerError(
                    txt.EXECUTE_FRAMES,
                    f"RuntimeError: Worker failed with error '{err}', please check the stack "
                    "trace above for the root cause",
                    at_start=bool(reply.get("at_start")),
                )
            results.append(reply.get("result"))
        return results

    def init_device(self) -> None:
        self._call("init_device")

    def load_model(self) -> None:
        self._call("load_model")

    def determine_available_memory(self) -> MemoryPlan:
        plans = [MemoryPlan(**p) for p in self._call("determine_available_memory")]
        self.plan = min(plans, key=lambda p: p.available_bytes)
        return self.plan

    def capture(self) -> None:
        self._call("capture")

    def execute(self, prompt_tokens: int, max_tokens: int) -> float:
        ttfts = self._call("execute", prompt_tokens=prompt_tokens, max_tokens=max_tokens)
        return float(max(ttfts))

    def check_fault(self) -> str | None:
        try:
            faults = [f for f in self._call("check_fault") if f]
        except WorkerError as exc:
            return exc.text
        if not faults:
            return None
        err = str(faults[0]).split("\n", 1)[0].removeprefix("RuntimeError: ")
        return (
            f"RuntimeError: Worker failed with error '{err}', please check the stack trace "
            "above for the root cause"
        )

    def profile(self, start: bool, root: Path | None) -> None:
        self._call("profile", start=start, root=str(root) if root else None)

    def shutdown(self) -> None:
        for ch in self.chans:
            ch.send({"op": "shutdown"})
            ch.close()
        # Workers stuck in the driver keep running; the engine core does not wait for them.
        for proc in self.procs:
            try:
                proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass


def make_executor(
    cfg: ServeConfig,
    version: VersionProfile,
    out: VllmOut,
    state_path: Path | None,
    dynamic: bool,
) -> Executor:
    """The executor vLLM would pick for ``cfg``."""
    if cfg.executor == "mp":
        return MultiprocExecutor(cfg, version, out, state_path, dynamic)
    return UniProcExecutor(cfg, version, out, state_path, dynamic)
