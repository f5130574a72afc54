"""The fake engine core: request accounting, metrics, and the ways it dies.

It runs inside the fake server process; HTTP handler threads call
:meth:`Engine.complete`, and the fault monitor calls :meth:`Engine.die_fault`.
A death prints what real vLLM-Ascend prints and sets :attr:`Engine.dead`; the
server's main loop then shuts down and exits with status 0, as vLLM does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ascend_doctor.sim.faults import Fault, get_fault
from ascend_doctor.sim.models import (
    TOTAL_CAPACITY_GIB,
    Headroom,
    MemoryPlan,
    activation_bytes,
    fmt_gib,
)
from ascend_doctor.sim.msprof import SLOW_KEY
from ascend_doctor.sim.state import find_device, read_state, take_quirk
from ascend_doctor.sim.vlog import API, ENGINE, Plog, VllmOut

_SITE = "/usr/local/python3.11.13/lib/python3.11/site-packages"
_ENGINE_FRAMES = f"""Traceback (most recent call last):
  File "{_SITE}/vllm/v1/engine/core.py", line 701, in run_engine_core
    engine_core.run_busy_loop()
  File "{_SITE}/vllm/v1/engine/core.py", line 728, in run_busy_loop
    self._process_engine_step()
  File "{_SITE}/vllm/v1/engine/core.py", line 754, in _process_engine_step
    outputs, model_executed = self.step_fn()
  File "{_SITE}/vllm/v1/engine/core.py", line 284, in step
    model_output = self.execute_model_with_error_logging(
  File "{_SITE}/vllm_ascend/worker/model_runner_v1.py", line 1801, in execute_model
    hidden_states = self._generate_process_reqs_hidden_states("""
_API_DEAD = f"""AsyncLLM output_handler failed.
Traceback (most recent call last):
  File "{_SITE}/vllm/v1/engine/async_llm.py", line 439, in output_handler
    outputs = await engine_core.get_output_async()
  File "{_SITE}/vllm/v1/engine/core_client.py", line 846, in get_output_async
    raise self._format_exception(outputs) from None
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. \
See stack trace (above) for the root cause."""

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class ServeConfig:
    """The effective configuration of one fake ``vllm serve``."""

    model: str
    served_name: str
    host: str
    port: int
    max_model_len: int
    gpu_memory_utilization: float
    max_num_seqs: int
    block_size: int
    tensor_parallel_size: int
    enforce_eager: bool
    devices: list[int]
    expandable_segments: bool
    non_default: dict[str, Any] = field(default_factory=dict)


def ttft_seconds(prompt_tokens: int) -> float:
    """The simulated time to first token of a prompt."""
    return 0.01 + prompt_tokens * 2e-6


class Engine:
    """Counters behind /metrics and the request path, shared by handler threads."""

    def __init__(
        self, cfg: ServeConfig, plan: MemoryPlan, headroom: Headroom, out: VllmOut, plog: Plog
    ) -> None:
        self.cfg, self.plan, self.headroom, self.out, self.plog = cfg, plan, headroom, out, plog
        self.dead = threading.Event()
        self._lock = threading.Lock()
        self.running = 0
        self.active_tokens = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.success_total = 0
        self.ttft_counts = [0] * len(TTFT_BUCKETS)
        self.ttft_count = 0
        self.ttft_sum = 0.0
        self._since = time.monotonic()
        self._window_prompt = 0
        self._window_gen = 0
        self.state_path: Path | None = None  # the host state, for its quirks
        self.stop = threading.Event()  # set when the server shuts down

    def kv_usage(self) -> float:
        """Fraction of KV cache blocks in use (0..1)."""
        cap = self.plan.capacity_tokens
        return min(1.0, self.active_tokens / cap) if cap else 0.0

    def complete(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Run one request; False if the engine died (now or before)."""
        if self.dead.is_set():
            return False
        need = activation_bytes(prompt_tokens)
        with self._lock:
            self.running += 1
            self.active_tokens += prompt_tokens + max_tokens
        try:
            if need > self.headroom.usable_bytes:
                self.die_oom(need)
                return False
            if self.state_path is not None and take_quirk(self.state_path, "hang") == "once":
                # a stuck collective: the request never finishes, /health still says 200
                self.stop.wait()
                return False
            # A slow part injected on one rank (``profile_slow``) slows every step of the
            # group, prefill and decode alike: the ranks meet at each all-reduce.
            slow = self._slow_factor()
            ttft = ttft_seconds(prompt_tokens) * slow
            time.sleep(ttft)
            # Decode quickly: the sim is about failures, not throughput.
            time.sleep(min(0.5, max_tokens * 0.001) * slow)
            if self.dead.is_set():
                return False
            with self._lock:
                self.prompt_tokens_total += prompt_tokens
                self.generation_tokens_total += max_tokens
                self._window_prompt += prompt_tokens
                self._window_gen += max_tokens
                self.success_total += 1
                self.ttft_count += 1
                self.ttft_sum += ttft
                for i, bound in enumerate(TTFT_BUCKETS):
                    if ttft <= bound:
                        self.ttft_counts[i] += 1
            return True
        finally:
            with self._lock:
                self.running -= 1
                self.active_tokens -= prompt_tokens + max_tokens

    def _slow_factor(self) -> float:
        """How much slower each step runs (``profile_slow`` in the host state; 1: not)."""
        if self.state_path is None:
            return 1.0
        try:
            raw = read_state(self.state_path).get(SLOW_KEY)
        except (OSError, ValueError):
            return 1.0
        if not isinstance(raw, dict):
            return 1.0
        try:
            return max(1.0, float(raw.get("factor", 1.0)))
        except (TypeError, ValueError):
            return 1.0

    def _die(self, root_cause: str) -> None:
        """Print the engine's fatal error, then the API server's EngineDeadError."""
        with self._lock:
            if self.dead.is_set():
                return
            self.dead.set()
        self.out.log(
            ENGINE,
            "ERROR",
            "core.py:710",
            f"EngineCore encountered a fatal error.\n{_ENGINE_FRAMES}\n{root_cause}",
        )
        self.out.log(API, "ERROR", "async_llm.py:480", _API_DEAD)

    def die_oom(self, need: int) -> None:
        """Die of an activation allocation that does not fit (the ``npu-oom`` scenario)."""
        h = self.headroom
        total = TOTAL_CAPACITY_GIB * 1024**3
        free = max(0, h.usable_bytes)
        text = (
            f"RuntimeError: NPU out of memory. Tried to allocate {fmt_gib(need)} "
            f"(NPU 0; {fmt_gib(total)} total capacity; {fmt_gib(h.allocated_bytes)} already "
            f"allocated; {fmt_gib(h.allocated_bytes)} current active; {fmt_gib(free)} free; "
            f"{fmt_gib(h.reserved_bytes)} reserved in total by PyTorch) If reserved memory is >> "
            "allocated memory try setting max_split_size_mb to avoid fragmentation."
        )
        self.plog.write(
            "ERROR",
            "APP",
            "memory_allocator.cc:412",
            f"Device 0 out of memory: tried to allocate {need} bytes, free {free} bytes.",
        )
        self._die(text)

    def die_fault(self, device: int, fault: Fault) -> None:
        """Die because ``device`` (physical id) failed: plog lines first, then stdout."""
        if self.dead.is_set():
            return
        self.plog.drv("ERROR", "devmgr", fault.drv_func, fault.drv_text.format(device=device))
        self.plog.write(
            "ERROR",
            "RUNTIME",
            "device_error_proc.cc:1045",
            f"report error: device_id={device}, the device is abnormal, "
            f"error code is {fault.acl_code}",
        )
        self.plog.device(
            device, "ERROR", "RUNTIME", "stream.cc:1044", "GetError:report error module_type=7"
        )
        logical = self.cfg.devices.index(device) if device in self.cfg.devices else 0
        stamp = datetime.now().strftime("%Y-%m-%d-%H:%M:%S")
        text = (
            "RuntimeError: synchronize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:467 "
            f"NPU function error: AclrtSynchronizeStreamWithTimeout(stream), "
            f"error code is {fault.acl_code}\n"
            f"[ERROR] {stamp} (PID:{self.out.pid}, Device:{logical}, RankID:-1) "
            "ERR00100 PTA call acl api failed\n"
            f"[Error]: The device is abnormal ({fault.error_info}). "
            "Rectify the fault based on the error information in the ascend log."
        )
        self._die(text)

    def take_window(self) -> tuple[float, float]:
        """Prompt and generation throughput since the last call, in tokens/s."""
        now = time.monotonic()
        with self._lock:
            span = max(1e-6, now - self._since)
            rates = (self._window_prompt / span, self._window_gen / span)
            self._since, self._window_prompt, self._window_gen = now, 0, 0
        return rates

    def watch_faults(self, state_path: Path, stop: threading.Event) -> None:
        """Thread body: die as soon as a device this engine uses gets a fault."""
        # The host injects faults by editing the state; poll it like a driver event.
        while not self.dead.is_set() and not stop.is_set():
            try:
                state: dict[str, Any] | None = read_state(state_path)
            except (OSError, ValueError):
                state = None  # mid-replace or host torn down: try again next tick
            for d in self.cfg.devices:
                dev = find_device(state, d) if state else None
                if dev is not None and dev.get("fault"):
                    self.die_fault(d, get_fault(dev["fault"]))
            stop.wait(0.2)

    def log_stats(self, stop: threading.Event, interval: float) -> None:
        """Thread body: the periodic ``Engine 000: ...`` stats line."""
        while not stop.wait(interval) and not self.dead.is_set():
            prompt, gen = self.take_window()
            self.out.log(
                ENGINE,
                "INFO",
                "loggers.py:123",
                f"Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s, Avg "
                f"generation throughput: {gen:.1f} tokens/s, Running: {self.running} "
                f"reqs, Waiting: 0 reqs, GPU KV cache usage: {self.kv_usage() * 100:.1f}%, "
                "Prefix cache hit rate: 0.0%",
            )
