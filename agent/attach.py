"""Attach mode: watch a server that systemd or Kubernetes already runs.

The doctor observes it the same way (logs, collectors, rules, incidents) but does not own
the process: it learns the server's state from ``/health`` (and the PID, when given), restarts
it only through the operator's restart command (an argv, never a shell), and raises launch
changes it cannot apply itself as suggestions with the exact flag to change.

:class:`AttachedServer` offers the part of :class:`~ascend_doctor.agent.supervisor.Supervisor`
the daemon uses (``state``, ``pid``, ``start``, ``stop``, ``restart``, ``run``, ``shutdown``),
so everything downstream of it is the same code in both modes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil

from ascend_doctor.agent.supervisor import ExitDecision, Probe, Sleep
from ascend_doctor.core.config import ServerConfig
from ascend_doctor.core.errors import ConfigError
from ascend_doctor.core.events import Category, Finding, ProcessEvent, ProcessState, Role, Severity
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.core.procs import listening_pid, pid_alive
from ascend_doctor.core.words import plural

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttachSpec:
    """What ``watch --attach`` was told about the server."""

    url: str
    """Base URL of the server (``http://127.0.0.1:8000``)."""
    pid: int | None = None
    """The server's main PID, when known (else found by its listening port when possible)."""
    restart_command: tuple[str, ...] = ()
    """How to restart it (``systemctl restart vllm``), as an argv; empty: restarts are
    suggested to the operator."""

    @classmethod
    def parse(cls, url: str, pid: int | None, restart_command: str | None) -> AttachSpec:
        """Validate the CLI's values; ConfigError names the bad one."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--url {url!r}: expected http://HOST:PORT")
        argv: tuple[str, ...] = ()
        if restart_command:
            try:
                argv = tuple(shlex.split(restart_command))
            except ValueError as exc:
                raise ConfigError(f"--restart-command {restart_command!r}: {exc}") from None
        if pid is not None and pid <= 0:
            raise ConfigError(f"--pid {pid}: expected a process id")
        return cls(url.rstrip("/"), pid, argv)

    @property
    def port(self) -> int:
        """The server's TCP port."""
        parts = urlsplit(self.url)
        return parts.port or (443 if parts.scheme == "https" else 80)


def process_spec(pid: int | None) -> LaunchSpec:
    """The attached server's command line and environment, as far as this user may read them
    (empty when unknown): actions read the current flags from it."""
    if pid is None:
        return LaunchSpec(())
    try:
        proc = psutil.Process(pid)
        argv = tuple(proc.cmdline())
        try:
            env: Mapping[str, str] = proc.environ()
        except psutil.Error:
            env = {}
    except psutil.Error:
        return LaunchSpec(())
    return LaunchSpec(argv, dict(env))


class AttachedServer:
    """Follows a server the doctor does not own; restarts it only through a command."""

    def __init__(
        self,
        attach: AttachSpec,
        config: ServerConfig,
        *,
        probe: Probe,
        on_change: Callable[[ProcessEvent], None],
        on_exit: Callable[[ProcessEvent], Awaitable[ExitDecision]],
        command_timeout: float,
        wall: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.attach = attach
        self.config = config
        self._probe = probe
        self._on_change = on_change
        self._on_exit = on_exit
        self._command_timeout = command_timeout
        self._wall = wall
        self._sleep = sleep
        self.state = ProcessState.STARTING
        self.pid: int | None = attach.pid
        self.fatal_reason = ""
        self.dying = False  # its output is not ours to read as it happens
        self._restart_reason = ""
        self._shutdown = False
        self.probe_failures = 0
        self.restarts = 0
        self._silent_since: float | None = None  # when it was first found not answering

    @property
    def can_restart(self) -> bool:
        """Whether a restart command was given."""
        return bool(self.attach.restart_command)

    # -- control -------------------------------------------------------------------------------

    def start(self) -> None:
        """Ask for a restart (through the restart command; nothing without one)."""
        if self.can_restart and not self._restart_reason:
            self._restart_reason = "restart requested"

    async def stop(self, reason: str = "stop requested") -> None:
        """The doctor never stops a server it does not own; recorded and ignored."""
        log.warning("attach mode: not stopping the server (%s): it is not the doctor's", reason)

    async def restart(self, reason: str) -> None:
        """Restart through the restart command at the next turn of ``run()``."""
        if self.can_restart:
            self._restart_reason = reason

    async def shutdown(self) -> None:
        """End ``run()``; the server keeps running."""
        self._shutdown = True

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the server until ``shutdown()``."""
        while not self._shutdown:
            if self._restart_reason:
                reason, self._restart_reason = self._restart_reason, ""
                await self._run_restart(reason)
                continue
            await self._check()
            interval = (
                self.config.probe_interval
                if self.state == ProcessState.RUNNING
                else self.config.health_interval
            )
            await self._sleep(interval)

    async def _check(self) -> None:
        if self.pid is not None and not pid_alive(self.pid):
            old, self.pid = self.pid, None  # whoever starts it again, it will have a new pid
            if self.state == ProcessState.RUNNING:
                await self._down(f"pid {old} exited", old)
                return
        ok = await self._probe()
        if ok is None:
            return  # the doctor could not ask: no news
        if ok:
            self.probe_failures = 0
            if self.pid is None:
                self.pid = listening_pid(self.attach.port)
            if self.state != ProcessState.RUNNING:
                self._silent_since = None
                self._change(ProcessState.RUNNING, "healthy: /health answered 200")
            return
        if self.state != ProcessState.RUNNING:
            # say at once that nothing answers; after start_timeout it is down (an incident)
            if self._silent_since is None:
                self._silent_since = self._wall()
                self._change(ProcessState.STARTING, f"nothing answers at {self.attach.url}")
            elif self._wall() - self._silent_since > self.config.start_timeout:
                why = f"no answer at {self.attach.url} for {self.config.start_timeout:.0f}s"
                await self._down(why, None)
                self._silent_since = float("inf")  # once, until it answers again
            return
        self.probe_failures += 1
        if self.probe_failures >= self.config.probe_failures:
            await self._down(
                f"/health failed {plural(self.probe_failures, 'time')} in a row", self.pid
            )

    async def _down(self, why: str, pid: int | None) -> None:
        """The server went away: decide with the daemon, restart only through the command."""
        self.pid = None
        event = self._change(ProcessState.EXITED, why, pid=pid, crashed=True)
        decision = await self._on_exit(event)
        if decision == ExitDecision.RESTART and self.can_restart:
            self._restart_reason = "restarting the server to apply the remediation"
        else:
            # whatever manages the server (systemd, kubelet) brings it back; wait for it
            self._silent_since = self._wall()
            self._change(ProcessState.STARTING, "waiting for the server's manager to restart it")

    async def _run_restart(self, reason: str) -> None:
        argv = list(self.attach.restart_command)
        self.restarts += 1
        self._change(ProcessState.STARTING, f"{reason}: running {shlex.join(argv)}")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
        except OSError as exc:
            self.fatal_reason = f"restart command failed to run: {exc}"
            log.error("attach mode: %s", self.fatal_reason)
            return
        try:
            async with asyncio.timeout(self._command_timeout):
                out, _ = await proc.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            log.error("attach mode: restart command timed out after %.0fs", self._command_timeout)
            return
        if proc.returncode != 0:
            text = out.decode(errors="replace").strip()[-300:]
            log.error("attach mode: restart command exited %s: %s", proc.returncode, text)
            return
        self.pid = None  # a new process; found again by its port once healthy
        deadline = self._wall() + self.config.start_timeout
        while not self._shutdown and self._wall() < deadline:
            if await self._probe():
                self.pid = self.attach.pid if pid_alive(self.attach.pid) else None
                self.pid = self.pid or listening_pid(self.attach.port)
                self.probe_failures = 0
                self._change(ProcessState.RUNNING, "healthy after the restart command")
                return
            await self._sleep(self.config.health_interval)
        if not self._shutdown:
            self._change(
                ProcessState.EXITED,
                f"not healthy {self.config.start_timeout:.0f}s after the restart command",
                crashed=True,
            )

    def _change(
        self, state: ProcessState, reason: str, *, pid: int | None = None, crashed: bool = False
    ) -> ProcessEvent:
        event = ProcessEvent(
            state=state,
            previous=self.state,
            at=self._wall(),
            pid=pid if pid is not None else self.pid,
            exit_code=None,
            crashed=crashed,
            reason=reason,
        )
        self.state = state
        log.info("attached server %s: %s", state.value, reason)
        try:
            self._on_change(event)
        except Exception:  # recording it failed (a full disk): following it goes on
            log.exception("recording the attached server's change failed")
        return event


def silent_finding(event: ProcessEvent) -> Finding:
    """An attached server that never answered: no text says why, so this is the evidence."""
    cat, sev = Category.SERVER_CRASHED, Severity.CRITICAL
    return Finding("attach-no-answer", cat, sev, Role.ROOT, "server", event.reason, at=event.at)


__all__ = ["AttachSpec", "AttachedServer", "process_spec", "silent_finding"]
