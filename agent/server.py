"""The watched server, whatever runs it: the supervisor (the doctor's own server), an
attached server (someone else's, restarted only through a command) or none (the doctor only
observes). Remediation and the decider see it through :class:`ServerHandle`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Protocol

from ascend_doctor.agent.attach import AttachedServer, AttachSpec
from ascend_doctor.agent.supervisor import ExitDecision, Supervisor, http_probe
from ascend_doctor.core.config import Config
from ascend_doctor.core.events import ProcessEvent, ProcessState
from ascend_doctor.core.launch import LaunchSpec


class ServerProcess(Protocol):
    """What the supervisor and an attached server both are."""

    state: ProcessState
    pid: int | None
    fatal_reason: str
    probe_failures: int

    @property
    def dying(self) -> bool:
        """It printed an engine-death line and has not exited yet."""
        ...

    def start(self) -> None:
        """Ask for it to run."""
        ...

    async def stop(self, reason: str = "stop requested") -> None:
        """Stop it and keep it stopped."""
        ...

    async def restart(self, reason: str) -> None:
        """Stop it if it runs, then start it again."""
        ...

    async def shutdown(self) -> None:
        """End ``run()``."""
        ...

    async def run(self) -> None:
        """Supervise or follow it until ``shutdown()``."""
        ...


class ServerHandle:
    """The watched server as remediation and the decider see it."""

    def __init__(
        self,
        process: Supervisor | AttachedServer | None,
        spec: Callable[[], LaunchSpec],
        base_env: Mapping[str, str],
    ) -> None:
        self.process = process
        """What runs or follows it (None: the doctor only observes)."""
        self._spec = spec
        self._base_env = dict(base_env)
        self._own_pids: set[int] = set()
        self.before_stop: Callable[[str], Awaitable[None]] | None = None
        """With several servers: waits until this one may be stopped on purpose and drains
        it; raises ``StopRefused`` when it may not (``agent/fleet.py``)."""

    @property
    def supervised(self) -> bool:
        """The doctor runs the server: it may change, stop and restart it."""
        return isinstance(self.process, Supervisor)

    @property
    def attached(self) -> bool:
        """Attach mode: the server is someone else's."""
        return isinstance(self.process, AttachedServer)

    @property
    def can_restart(self) -> bool:
        """Attach mode with a restart command."""
        return isinstance(self.process, AttachedServer) and self.process.can_restart

    @property
    def own_pids(self) -> set[int]:
        """PIDs the server's processes have had."""
        return self._own_pids

    @property
    def base_env(self) -> Mapping[str, str]:
        """The environment the server inherits."""
        return self._base_env

    @property
    def state(self) -> ProcessState | None:
        """Its state (None when nothing is watched)."""
        return None if self.process is None else self.process.state

    @property
    def pid(self) -> int | None:
        """Its main pid now."""
        return None if self.process is None else self.process.pid

    @property
    def dying(self) -> bool:
        """It announced its death and has not exited yet."""
        return self.process is not None and self.process.dying

    @property
    def healthy(self) -> bool:
        """Running, and its last /health probe answered 200 (an engine-death line is text:
        it does not count against this)."""
        p = self.process
        return p is not None and p.state == ProcessState.RUNNING and p.probe_failures == 0

    def spec(self) -> LaunchSpec:
        """Its effective launch spec."""
        return self._spec()

    def running(self) -> bool:
        """Whether a server process exists."""
        return self.pid is not None

    def start(self) -> None:
        """Ask for it to run (a step stopped it)."""
        if self.process is not None:
            self.process.start()

    async def stop(self, reason: str) -> None:
        """Stop it and keep it stopped."""
        if self.process is not None:
            await self._planned(reason)
            await self.process.stop(reason)

    async def restart(self, reason: str) -> None:
        """Stop it if it runs and start it again."""
        if self.process is not None:
            await self._planned(reason)
            await self.process.restart(reason)

    async def _planned(self, reason: str) -> None:
        # a server that is not serving (dead, starting) has nothing left to protect
        if self.before_stop is not None and self.state == ProcessState.RUNNING:
            await self.before_stop(reason)


def build_process(
    config: Config,
    *,
    attach: AttachSpec | None,
    spec: Callable[[], LaunchSpec] | None,
    url: str,
    log_path: Path,
    on_change: Callable[[ProcessEvent], None],
    on_exit: Callable[[ProcessEvent], Awaitable[ExitDecision]],
    base_env: Mapping[str, str],
    before_restart: Callable[[str], Awaitable[None]] | None = None,
) -> Supervisor | AttachedServer | None:
    """What runs or follows the server: the supervisor for a command, an attached server for
    ``--attach``, nothing when the doctor only observes."""
    if attach is not None:
        return AttachedServer(
            attach,
            config.server,
            probe=http_probe(url),
            on_change=on_change,
            on_exit=on_exit,
            command_timeout=config.remediation.command_timeout,
        )
    if spec is not None:
        return Supervisor(
            spec,
            config.server,
            log_path,
            probe=http_probe(url),
            on_change=on_change,
            on_exit=on_exit,
            base_env=base_env,
            before_restart=before_restart,
        )
    return None


__all__ = ["ServerHandle", "ServerProcess", "build_process"]
