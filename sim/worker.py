"""The part of the fake server that holds an NPU: vLLM-Ascend's NPUWorker and model runner.

With one card (``--tensor-parallel-size 1``) vLLM runs its worker inside the engine core process
(UniProcExecutor); with more, each rank is its own ``VLLM::Worker_TPn`` process
(MultiprocExecutor). Either way the process that runs this code is the one the driver lists in
npu-smi's process table, writes its own plog, and, when its card loses its heartbeat, may hang
in the driver for a while before it can exit (it ignores SIGTERM then, as a process in an
uninterruptible driver call does), keeping the card.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from ascend_doctor.sim import vllm_text as txt
from ascend_doctor.sim.engine_core import ServeConfig
from ascend_doctor.sim.faults import Fault, get_fault
from ascend_doctor.sim.models import (
    HBM_GIB,
    MemoryPlan,
    activation_bytes,
    activation_headroom,
    get_profile,
    plan_memory,
)
from ascend_doctor.sim.msprof import DYNAMIC_KEY, SLOW_KEY, write_ascend_pt
from ascend_doctor.sim.state import (
    GROWTH_KEY,
    find_device,
    grown,
    prune_dead,
    read_state,
    take_quirk,
    update_state,
)
from ascend_doctor.sim.versions import VersionProfile
from ascend_doctor.sim.vlog import Plog, VllmOut, kernel_log


class WorkerError(Exception):
    """An exception raised in the worker: its traceback frames and its last line."""

    def __init__(self, frames: str, text: str, *, at_start: bool = False) -> None:
        super().__init__(text)
        self.frames, self.text, self.at_start = frames, text, at_start


def _comm() -> str:
    # What the driver reports as the process name: the kernel's comm (15 characters).
    try:
        return Path("/proc/self/comm").read_text().strip()
    except OSError:
        return "python3"


class Worker:
    """One rank: its card, its memory plan, its steps and its faults."""

    def __init__(
        self,
        cfg: ServeConfig,
        rank: int,
        version: VersionProfile,
        out: VllmOut,
        plog: Plog,
        state_path: Path | None,
        pid: int,
    ) -> None:
        self.cfg, self.rank, self.version, self.out, self.plog = cfg, rank, version, out, plog
        self.device = cfg.devices[rank] if rank < len(cfg.devices) else 0
        self.state_path, self.pid = state_path, pid
        self.plan: MemoryPlan | None = None
        self.fault: Fault | None = None
        self.fault_seen = threading.Event()
        self.stop = threading.Event()
        self.profile_started: float | None = None

    # -- host state ----------------------------------------------------------------------
    def _state(self) -> dict[str, Any] | None:
        return read_state(self.state_path) if self.state_path else None

    def _setting(self, key: str, default: float) -> float:
        state = self._state()
        return float(state.get(key, default)) if state else default

    def register(self, dynamic: bool) -> None:
        """Hold the card: the driver lists this process on it from now on."""
        if self.state_path is None:
            return
        mem = int(HBM_GIB * 1024 * self.cfg.gpu_memory_utilization)
        with update_state(self.state_path) as state:
            state["processes"] = [p for p in state["processes"] if p["pid"] != self.pid]
            state["processes"].append(
                {
                    "device": self.device,
                    "pid": self.pid,
                    "name": _comm(),
                    "memory_mb": mem,
                    "since": time.time(),
                }
            )
            if dynamic:
                # What msprof --dynamic=on checks before it attaches.
                pids = [p for p in state.get(DYNAMIC_KEY, []) if p != self.pid]
                state[DYNAMIC_KEY] = [*pids, self.pid]

    def release(self) -> None:
        """Let go of the card; safe to call more than once, from atexit too."""
        if self.state_path is None or not self.state_path.exists():
            return
        with update_state(self.state_path) as state:
            state["processes"] = [p for p in state["processes"] if p["pid"] != self.pid]
            if DYNAMIC_KEY in state:
                state[DYNAMIC_KEY] = [p for p in state[DYNAMIC_KEY] if p != self.pid]

    # -- start-up ------------------------------------------------------------------------
    def init_device(self, dynamic: bool) -> None:
        """Open the card (torch.npu.set_device) and check its free memory."""
        state = self._state()
        if state is not None:
            dev = find_device(state, self.device)
            if dev is None or dev["health"] != "OK":
                self.plog.write(
                    "ERROR",
                    "RUNTIME",
                    "device.cc:1163",
                    f"Set device failed, device_id={self.device}, error code is 507033",
                )
                raise WorkerError(
                    txt.DEVICE_FRAMES, txt.set_device_error(self.pid, self.rank), at_start=True
                )
            prune_dead(state)
            foreign_mb = sum(
                p["memory_mb"]
                for p in state["processes"]
                if p["device"] == self.device and p["pid"] != self.pid
            )
            free = HBM_GIB - foreign_mb / 1024
            if foreign_mb and free < self.cfg.gpu_memory_utilization * HBM_GIB:
                err = txt.free_memory_error(free, HBM_GIB, self.cfg.gpu_memory_utilization)
                raise WorkerError(txt.DEVICE_FRAMES, err, at_start=True)
        self.register(dynamic)

    def load_model(self) -> None:
        """Load the weights: vLLM-Ascend's model runner lines."""
        self.out.log(
            "INFO", "model_runner_v1.py:2303", f"Starting to load model {self.cfg.model}..."
        )
        load_seconds = self._setting("load_seconds", 0.5)
        if self.stop.wait(load_seconds):
            raise SystemExit(0)
        self.plan = plan_memory(
            get_profile(self.cfg.model),
            self.cfg.gpu_memory_utilization,
            self.cfg.tensor_parallel_size,
            self.cfg.block_size,
        )
        self.out.log(
            "INFO", "default_loader.py:267", f"Loading weights took {load_seconds:.2f} seconds"
        )
        self.out.log(
            "INFO",
            "model_runner_v1.py:2345",
            f"Loading model weights took {self.plan.weights_gib:.4f} GB",
        )
        if self.state_path is not None and take_quirk(self.state_path, "aicore") == "always":
            self._aicore_exception()

    def determine_available_memory(self) -> int:
        """Profile run: what is left for the KV cache on this card, in bytes."""
        assert self.plan is not None
        available = max(0, self.plan.available_bytes)
        total = int(HBM_GIB * 1024**3)
        if self.version.kv_memory_line == "bytes":
            self.out.log(
                "INFO",
                "worker_v1.py:256",
                f"Available memory: {available}, total memory: {total}",
            )
        else:
            self.out.log(
                "INFO", "worker.py:594", f"Available KV cache memory: {available / 1024**3:.2f} GiB"
            )
        return self.plan.available_bytes

    def capture(self) -> None:
        """ACL graph capture (skipped with --enforce-eager)."""
        if self.cfg.enforce_eager:
            return
        fails = (
            self.state_path is not None and take_quirk(self.state_path, "graph_capture") == "fail"
        )
        self.out.log(
            "INFO",
            "acl_graph.py:150",
            "Capturing ACL graphs (mixed prefill-decode, PIECEWISE): 67 sizes",
        )
        if fails:
            self.plog.write(
                "ERROR",
                "RUNTIME",
                "api_c.cc:1097",
                "rtMemcpy:ErrCode=107030, desc=[the current capture mode does not support this"
                " operation], InnerCode=0x703001c",
            )
            raise WorkerError(txt.CAPTURE_FRAMES, txt.capture_error(), at_start=True)
        self.out.log("INFO", "model_runner_v1.py:3120", "Graph capturing finished in 1 secs")

    def _aicore_exception(self) -> None:
        """The profile run's first kernel raises an AI Core exception, at every start."""
        self.plog.write(
            "ERROR",
            "RUNTIME",
            "device_error_core_proc.cc:1060",
            f"PrintCoreInfo:The error from device(chipId:{self.device}, dieId:0), serial number is"
            " 7, there is an exception of fftsplus aicore error, core id is 7, error code = 0,"
            " dump info: pc start: 0x12c0c136b000",
        )
        raise WorkerError(
            txt.PROFILE_RUN_FRAMES, txt.aicore_error(self.pid, self.device), at_start=True
        )

    # -- serving -------------------------------------------------------------------------
    def execute(self, prompt_tokens: int, max_tokens: int) -> float:
        """Run one request's prefill and decode; return the time to first token."""
        assert self.plan is not None
        if self.fault is not None:
            raise WorkerError(txt.EXECUTE_FRAMES, self._fault_text(self.fault))
        headroom = activation_headroom(
            self.plan, self.cfg.gpu_memory_utilization, self.cfg.expandable_segments
        )
        need = activation_bytes(prompt_tokens)
        if self._grown_full():
            headroom = dataclasses.replace(headroom, usable_bytes=0)
        if need > headroom.usable_bytes:
            self.plog.write(
                "ERROR",
                "APP",
                "memory_allocator.cc:412",
                f"Device {self.rank} out of memory: tried to allocate {need} bytes, free "
                f"{max(0, headroom.usable_bytes)} bytes.",
            )
            raise WorkerError(txt.EXECUTE_FRAMES, txt.oom_error(need, headroom, self.rank))
        if self.state_path is not None and take_quirk(self.state_path, "hang") == "once":
            # A stuck collective: the step never finishes, the worker never answers.
            self.stop.wait()
            raise SystemExit(0)
        # A slow part injected on one rank (``profile_slow``) slows every step of the group,
        # prefill and decode alike: the ranks meet at each all-reduce.
        slow = self._slow_factor()
        ttft = (0.01 + prompt_tokens * 2e-6) * slow
        decode = min(0.5, max_tokens * 0.001) * slow
        if self.fault_seen.wait(ttft + decode) and self.fault is not None:
            raise WorkerError(txt.EXECUTE_FRAMES, self._fault_text(self.fault))
        return ttft

    def _grown_full(self) -> bool:
        """The card is full: this process's memory grew (``hbm_growth_mb_per_s``) until no
        headroom is left for the next request's activations."""
        state = self._state()
        if not state or not state.get(GROWTH_KEY):
            return False
        dev = find_device(state, self.device)
        mine = [p for p in grown(state) if p["device"] == self.device]
        idle = int(dev.get("idle_hbm_mb", 0)) if dev else 0
        return idle + sum(int(p["memory_mb"]) for p in mine) >= HBM_GIB * 1024

    def _slow_factor(self) -> float:
        """How much slower each step runs (``profile_slow`` in the host state; 1: not)."""
        try:
            raw = (self._state() or {}).get(SLOW_KEY)
        except (OSError, ValueError):
            return 1.0
        if not isinstance(raw, dict):
            return 1.0
        try:
            return max(1.0, float(raw.get("factor", 1.0)))
        except (TypeError, ValueError):
            return 1.0

    def check_fault(self) -> str | None:
        """The pending fault's error text (the runtime noticed it between steps), or None."""
        if self.fault is None:
            return None
        return self._fault_text(self.fault)

    def watch_faults(self) -> None:
        """Thread body: notice a fault injected on this card, like the driver reports it."""
        while not self.stop.is_set():
            try:
                state = self._state()
            except (OSError, ValueError):
                state = None  # mid-replace or host torn down: try again next tick
            dev = find_device(state, self.device) if state else None
            if dev is not None and dev.get("fault"):
                self._on_fault(get_fault(dev["fault"]), state or {})
                return
            self.stop.wait(0.2)

    def _on_fault(self, fault: Fault, state: dict[str, Any]) -> None:
        root = Path(state["kernel_log"]) if state.get("kernel_log") else None
        if root is not None and fault.kernel_text:
            kernel_log(root, fault.kernel_text.format(device=self.device))
        for where, text in fault.plog_lines:
            self.plog.write("ERROR", "RUNTIME", where, text.format(device=self.device))
        self.plog.device(
            self.device, "ERROR", "RUNTIME", "stream.cc:1044", "GetError:report error module_type=7"
        )
        self.fault = fault
        self.fault_seen.set()

    def _fault_text(self, fault: Fault) -> str:
        stamp = datetime.now().strftime("%Y-%m-%d-%H:%M:%S")
        return txt.device_fault_error(fault, self.pid, self.rank, self.device, stamp)

    def hang_in_driver(self) -> None:
        """After a heartbeat loss the process is stuck in the driver before it can exit."""
        if self.fault is None or not self.fault.driver_hang:
            return
        seconds = self._setting("driver_hang_seconds", 0.0)
        if seconds <= 0:
            return
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if self.state_path is not None:
            # SIGKILL cannot end a driver call either: the card stays held until it returns.
            with update_state(self.state_path) as state:
                for p in state["processes"]:
                    if p["pid"] == self.pid:
                        p["held_until"] = time.time() + seconds
        time.sleep(seconds)

    # -- profiling -----------------------------------------------------------------------
    def profile(self, start: bool, root: Path | None) -> None:
        """torch_npu's profiler in this worker; stopping parses the trace, which takes time."""
        if root is None:
            return
        if start:
            if self.profile_started is None:
                self.profile_started = time.time()
            return
        began, self.profile_started = self.profile_started, None
        if began is None:
            return
        ended = time.time()
        # torch_npu analyses the raw data before the call returns (minutes on a real trace).
        self.stop.wait(self._setting("profile_parse_seconds", 1.0))
        top = write_ascend_pt(
            root,
            self.pid,
            began,
            ended,
            self.device,
            rank=self.rank,
            devices=list(self.cfg.devices[: self.cfg.tensor_parallel_size]) or [self.device],
        )
        self.out.log("INFO", "profiler.py:112", f"Profiling data is saved in {top}")
