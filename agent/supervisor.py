"""The supervisor: a typed state machine around ``vllm serve``.

States in the Supervisor tradition. RUNNING means "/health answered 200", not
"still alive". ``_change_state`` is the one mutator; it emits a ProcessEvent.
Backoff is an injectable policy and every wait goes through an injectable
``sleep`` so tests run on a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from ascend_doctor.agent.server_output import OutputTee
from ascend_doctor.collectors.vllm import health_probe as http_probe
from ascend_doctor.core.config import ServerConfig
from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import ProcessEvent, ProcessState
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.rules.echo import is_request_log

log = logging.getLogger(__name__)

READ_SIZE = 65536


class ExitDecision(StrEnum):
    """What to do after the server exited on its own."""

    RESTART = "restart"  # a remediation changed something: start again now
    BACKOFF = "backoff"  # start again after the backoff delay
    STOP = "stop"  # stay stopped


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with a cap."""

    initial: float = 2.0
    """First delay, in seconds."""
    cap: float = 60.0
    """Largest delay."""
    factor: float = 2.0
    """Growth per consecutive failure."""

    def delay(self, failures: int) -> float:
        """Delay before the next start after ``failures`` consecutive failures (>= 1)."""
        return float(min(self.cap, self.initial * self.factor ** max(0, failures - 1)))


Probe = Callable[[], Awaitable[bool | None]]
"""True: /health answered 200; False: it did not; None: the doctor could not ask (its own
file descriptors or memory ran out): no news, never a reason to restart the server."""
Sleep = Callable[[float], Coroutine[Any, Any, None]]


class Supervisor:
    """Starts, health-gates, stops and restarts one server process."""

    def __init__(
        self,
        spec: Callable[[], LaunchSpec],
        config: ServerConfig,
        log_path: Path,
        *,
        probe: Probe,
        on_change: Callable[[ProcessEvent], None],
        on_exit: Callable[[ProcessEvent], Awaitable[ExitDecision]],
        base_env: Mapping[str, str] | None = None,
        before_restart: Callable[[str], Awaitable[None]] | None = None,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._spec = spec
        self.config = config
        self.log_path = log_path
        self._probe = probe
        self._on_change = on_change
        self._on_exit = on_exit
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._before_restart = before_restart  # keeps the evidence of a live, unhealthy server
        self.backoff = backoff or Backoff(config.backoff_initial, config.backoff_max)
        self._clock = clock
        self._wall = wall
        self._sleep = sleep
        self.state = ProcessState.STOPPED
        self.pid: int | None = None
        self.failures = 0  # consecutive starts that never reached RUNNING
        self.probe_failures = 0  # consecutive failed /health probes while RUNNING
        self.fatal_reason = ""
        self.label = "server"  # in its log lines: "server NAME" with several servers
        self._want_running = False
        self._shutdown = False
        self._wake = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._proc: asyncio.subprocess.Process | None = None
        self._marker_seen = False
        self._stop_reason = ""
        self._stopped = asyncio.Event()
        self._stopped.set()

    # -- control -------------------------------------------------------------------------------

    def start(self) -> None:
        """Ask for the server to run (from STOPPED, EXITED, BACKOFF or FATAL)."""
        self._want_running = True
        self.failures = 0 if self.state == ProcessState.FATAL else self.failures
        self._wake.set()

    async def stop(self, reason: str = "stop requested") -> None:
        """Stop the server and keep it stopped until ``start()``."""
        self._want_running = False
        self._stop_reason = reason
        self._wake.set()
        if self._proc is not None and self._proc.returncode is None:
            self._stop_reason = reason
            self._stop_requested.set()
            await self._stopped.wait()

    async def restart(self, reason: str) -> None:
        """Stop the server if it runs, then start it again."""
        if self.pid is not None:
            await self.stop(reason)
        self.start()

    async def shutdown(self) -> None:
        """Stop the server and end ``run()``."""
        self._shutdown = True
        await self.stop("doctor shutting down")
        self._wake.set()

    @property
    def dying(self) -> bool:
        """The server printed an engine-death line and has not exited yet."""
        return self._marker_seen and self._proc is not None and self._proc.returncode is None

    def wants_running(self) -> bool:
        """Whether the server is meant to run (a stop may arrive during any await)."""
        return self._want_running

    async def run_until_idle(self) -> None:
        """Supervise until the server is stopped or FATAL (tests and one-shot use)."""
        while self._want_running and not self._shutdown:
            await self._run_once()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Supervise until ``shutdown()``."""
        while not self._shutdown:
            if not self._want_running:
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._run_once()

    async def _run_once(self) -> None:
        spec = self._spec()
        # STOPPED/EXITED/BACKOFF -> STARTING
        self._change_state(ProcessState.STARTING, reason="starting " + " ".join(spec.argv[:3]))
        env = {**self._base_env, **spec.env}
        self._marker_seen = False
        self._stop_requested.clear()
        self._stop_reason = ""
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            proc = await asyncio.create_subprocess_exec(
                *spec.argv,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            # STARTING -> FATAL: a command that cannot run will not run after a backoff either
            why = exc.strerror or str(exc)
            self.fatal_reason = f"cannot run {spec.argv[0]!r}: {why}"
            self._want_running = False
            self._change_state(ProcessState.FATAL, reason=self.fatal_reason)
            return
        self._proc = proc
        self.pid = proc.pid
        self._stopped.clear()
        assert proc.stdout is not None
        pump = asyncio.create_task(self._pump(proc.stdout))
        reached_running = await self._wait_healthy(proc)
        if reached_running:
            # STARTING -> RUNNING
            self.failures = 0
            self._change_state(ProcessState.RUNNING, reason="/health answered 200")
            await self._watch_running(proc)
        if proc.returncode is None:
            await self._terminate(proc)
        code = proc.returncode
        await pump
        self._proc = None
        self.pid = None
        self._stopped.set()
        requested = self._stop_requested.is_set()
        if requested:
            # STOPPING -> STOPPED
            self._change_state(
                ProcessState.STOPPED, exit_code=code, reason=self._stop_reason or "stopped"
            )
            return
        crashed = code != 0 or self._marker_seen
        why = f"exited with status {code}"
        if code == 0 and self._marker_seen:
            why += " after an engine-death line: counted as a crash"
        if not reached_running:
            self.failures += 1
            why += " before becoming healthy"
        # STARTING/RUNNING -> EXITED
        event = self._change_state(ProcessState.EXITED, exit_code=code, crashed=crashed, reason=why)
        decision = await self._on_exit(event)
        if self._shutdown or not self._want_running:
            return
        if self.failures > self.config.start_retries:
            # EXITED -> FATAL
            self.fatal_reason = f"{self.failures} consecutive starts failed"
            self._want_running = False
            self._change_state(ProcessState.FATAL, reason=self.fatal_reason)
            return
        if decision == ExitDecision.STOP:
            self._want_running = False
            # EXITED -> STOPPED
            self._change_state(ProcessState.STOPPED, reason="staying stopped")
            return
        if decision == ExitDecision.RESTART:
            return  # EXITED -> STARTING at the top of the loop
        delay = self.backoff.delay(max(1, self.failures))
        # EXITED -> BACKOFF
        self._change_state(ProcessState.BACKOFF, reason=f"restarting in {delay:.1f}s")
        self._wake.clear()
        waiter = asyncio.create_task(self._wake.wait())
        try:
            await asyncio.wait(
                [waiter, asyncio.create_task(self._sleep(delay))],
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            waiter.cancel()
        if not self.wants_running():
            # BACKOFF -> STOPPED: a stop was asked for while waiting
            self._change_state(ProcessState.STOPPED, reason=self._stop_reason or "stopped")

    async def _wait_healthy(self, proc: asyncio.subprocess.Process) -> bool:
        deadline = self._clock() + self.config.start_timeout
        while proc.returncode is None and not self._stop_requested.is_set():
            if await self._probe():
                return proc.returncode is None
            if self._clock() >= deadline:
                log.error(
                    "%s not healthy after %.0fs; stopping it", self.label, self.config.start_timeout
                )
                self._stop_reason = ""
                return False
            await _wait_any(proc, self._stop_requested, self._sleep, self.config.health_interval)
        return False

    async def _watch_running(self, proc: asyncio.subprocess.Process) -> None:
        self.probe_failures = 0
        while proc.returncode is None and not self._stop_requested.is_set():
            await _wait_any(proc, self._stop_requested, self._sleep, self.config.probe_interval)
            if proc.returncode is not None or self._stop_requested.is_set():
                return
            ok = await self._probe()
            if ok is not False:  # None: the doctor could not ask (EMFILE), no news
                self.probe_failures = 0 if ok else self.probe_failures
                continue
            self.probe_failures += 1
            if self.probe_failures >= self.config.probe_failures:
                log.error(
                    "%s failed %d /health probes; restarting", self.label, self.probe_failures
                )
                if self._before_restart is not None:
                    why = f"{self.probe_failures} health probes failed in a row"
                    await self._before_restart(why)
                return

    async def _terminate(self, proc: asyncio.subprocess.Process) -> None:
        if self._stop_requested.is_set():
            # RUNNING/STARTING -> STOPPING
            self._change_state(ProcessState.STOPPING, reason=self._stop_reason)
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
            async with asyncio.timeout(self.config.stop_grace):
                await proc.wait()
        except TimeoutError:
            log.warning(
                "%s pid %d ignored SIGTERM for %.0fs; killing it",
                self.label,
                proc.pid,
                self.config.stop_grace,
            )
            _signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()

    async def _pump(self, stream: asyncio.StreamReader) -> None:
        """Tee the server's output to its log file (and the terminal); watch for crash lines."""
        markers = [m.encode() for m in self.config.crash_markers]
        tee = OutputTee(self.log_path, echo=self.config.echo)
        try:
            while data := await stream.read(READ_SIZE):
                lines = tee.feed(data)
                # whole lines only, and never a request-log line: a prompt that quotes
                # "EngineDeadError" must not make a healthy server look like it is dying
                if not self._marker_seen and any(m in lines for m in markers):
                    self._marker_seen = any(
                        any(m in line for m in markers) and not is_request_log(line)
                        for line in lines.split(b"\n")
                    )
        finally:
            tee.close()

    def _change_state(
        self,
        state: ProcessState,
        *,
        exit_code: int | None = None,
        crashed: bool = False,
        reason: str = "",
    ) -> ProcessEvent:
        event = ProcessEvent(
            state=state,
            previous=self.state,
            at=self._wall(),
            pid=self.pid,
            exit_code=exit_code,
            crashed=crashed,
            reason=reason,
        )
        self.state = state
        log.info(
            "%s %s -> %s%s", self.label, event.previous, state, f": {reason}" if reason else ""
        )
        try:
            self._on_change(event)
        except StoreError:
            pass  # a full disk: the store counts and logs it; supervision goes on
        except Exception:  # a failing part is logged and isolated
            log.exception("recording the server's change to %s failed", state)
        return event


async def _wait_any(
    proc: asyncio.subprocess.Process,
    stop: asyncio.Event,
    sleep: Sleep,
    seconds: float,
) -> None:
    """Wait ``seconds``, or less if the process exits or a stop is requested."""
    tasks = [
        asyncio.create_task(proc.wait()),
        asyncio.create_task(stop.wait()),
        asyncio.create_task(sleep(seconds)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


__all__ = ["Backoff", "ExitDecision", "Supervisor", "http_probe"]
