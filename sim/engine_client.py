"""The API server's side of the engine core: vLLM's AsyncLLM / EngineCoreClient.

It sends requests and utility calls to the engine core process and blocks the calling HTTP
thread until the answer comes (``/stop_profile`` waits for the workers to parse their traces;
while a step is stuck nothing answers). Engine stats feed the metrics and the periodic
``Engine 000:`` line, which the API server logs (vllm/v1/metrics/loggers.py LoggingStatLogger),
at INFO only when the engine was not idle since the last one.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from ascend_doctor.sim.ipc import Channel
from ascend_doctor.sim.vllm_metrics import VllmMetrics
from ascend_doctor.sim.vlog import VllmOut


class EngineClient:
    """Requests and stats between the HTTP handlers and the engine core process."""

    def __init__(self, ch: Channel, out: VllmOut, metrics: VllmMetrics) -> None:
        self.ch, self.out, self.metrics = ch, out, metrics
        self.ready = threading.Event()
        self.init_failed: str | None = None
        self.dead = threading.Event()
        self.running = 0
        self.waiting = 0
        self.kv_usage = 0.0
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._waiters: dict[str, tuple[threading.Event, dict[str, Any]]] = {}
        self._window_prompt = 0
        self._window_gen = 0
        self._last_rates = (0.0, 0.0)
        self._since = time.monotonic()

    def start(self) -> None:
        """Start reading the engine core's events."""
        threading.Thread(target=self._read, daemon=True, name="engine-output").start()

    def _read(self) -> None:
        while (msg := self.ch.recv()) is not None:
            ev = msg.get("ev")
            if ev == "ready":
                self.metrics.cache_config_info(int(msg.get("num_gpu_blocks", 0)))
                self.ready.set()
            elif ev == "init_failed":
                self.init_failed = str(msg.get("failed", "{}"))
                self.ready.set()
            elif ev == "stats":
                self.running, self.waiting = int(msg["running"]), int(msg["waiting"])
                self.kv_usage = float(msg["kv_usage"])
                self.metrics.running.set(self.running)
                self.metrics.waiting.set(self.waiting)
                self.metrics.kv_usage.set(self.kv_usage)
            elif ev == "done":
                self.metrics.finished(
                    int(msg["prompt_tokens"]), int(msg["gen_tokens"]), msg["ttft"], msg["e2e"]
                )
                with self._lock:
                    self._window_prompt += int(msg["prompt_tokens"])
                    self._window_gen += int(msg["gen_tokens"])
                self._wake(str(msg["rid"]), msg)
            elif ev == "utility_done":
                self._wake(str(msg["cid"]), msg)
            elif ev == "dead":
                break
        # EOF or ENGINE_CORE_DEAD: every caller waiting on the engine is told it died.
        self.dead.set()
        self.ready.set()
        with self._lock:
            waiters = list(self._waiters.values())
        for event, _ in waiters:
            event.set()

    def _wake(self, key: str, msg: dict[str, Any]) -> None:
        with self._lock:
            entry = self._waiters.get(key)
        if entry is not None:
            entry[1].update(msg)
            entry[0].set()

    def _call(self, msg: dict[str, Any], key: str) -> dict[str, Any] | None:
        event, result = threading.Event(), dict[str, Any]()
        with self._lock:
            self._waiters[key] = (event, result)
        try:
            if self.dead.is_set() or not self.ch.send(msg):
                return None
            event.wait()
            return result if result else None
        finally:
            with self._lock:
                self._waiters.pop(key, None)

    def generate(self, prompt_tokens: int, max_tokens: int) -> dict[str, Any] | None:
        """Run one request to completion; None if the engine died."""
        rid = f"r{next(self._ids)}"
        msg = {"op": "add", "rid": rid, "prompt_tokens": prompt_tokens, "max_tokens": max_tokens}
        return self._call(msg, rid)

    def profile(self, start: bool) -> bool:
        """``profile_async(is_start)``: False if the engine died before it answered."""
        cid = f"u{next(self._ids)}"
        return (
            self._call({"op": "utility", "call": "profile", "is_start": start, "cid": cid}, cid)
            is not None
        )

    def log_stats(self, stop: threading.Event, interval: float) -> None:
        """Thread body: the periodic stats line, suppressed while idle."""
        while not stop.wait(interval) and not self.dead.is_set():
            now = time.monotonic()
            with self._lock:
                span = max(1e-6, now - self._since)
                rates = (self._window_prompt / span, self._window_gen / span)
                self._since, self._window_prompt, self._window_gen = now, 0, 0
            idle = not any((*rates, *self._last_rates))
            self._last_rates = rates
            if idle:
                continue  # logged at DEBUG "to avoid log noise on an idle production system"
            self.out.log(
                "INFO",
                "loggers.py:127",
                f"Engine 000: Avg prompt throughput: {rates[0]:.1f} tokens/s, Avg generation "
                f"throughput: {rates[1]:.1f} tokens/s, Running: {self.running} reqs, Waiting: "
                f"{self.waiting} reqs, GPU KV cache usage: {self.kv_usage * 100:.1f}%, "
                "Prefix cache hit rate: 0.0%",
            )

    def shutdown(self) -> None:
        """Tell the engine core to stop and close the channel."""
        self.ch.send({"op": "shutdown"})
        self.ch.close()
