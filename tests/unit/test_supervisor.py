"""The supervisor's state machine, on real child processes and a fake clock."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from ascend_doctor.agent.supervisor import Backoff, ExitDecision, Supervisor
from ascend_doctor.core.config import ServerConfig
from ascend_doctor.core.events import ProcessEvent, ProcessState
from ascend_doctor.core.launch import LaunchSpec
from tests.conftest import wait_for


class Harness:
    def __init__(self, tmp_path: Path, code: str, *, healthy: bool, **cfg: object) -> None:
        self.events: list[ProcessEvent] = []
        self.exits: list[ProcessEvent] = []
        self.sleeps: list[float] = []
        self.healthy = healthy
        self.decision = ExitDecision.BACKOFF
        config = ServerConfig(echo=False, **cfg)  # type: ignore[arg-type]
        self.sup = Supervisor(
            lambda: LaunchSpec((sys.executable, "-c", code)),
            config,
            tmp_path / "server.log",
            probe=self.probe,
            on_change=self.events.append,
            on_exit=self.on_exit,
            sleep=self.sleep,
            before_restart=self.before_restart,
        )
        self.kept: list[tuple[str, int | None, bool]] = []

    async def before_restart(self, why: str) -> None:
        # what the evidence keeper sees: the server still alive, not yet signalled
        proc = self.sup._proc
        self.kept.append((why, self.sup.pid, proc is not None and proc.returncode is None))

    async def probe(self) -> bool:
        return self.healthy

    async def on_exit(self, event: ProcessEvent) -> ExitDecision:
        self.exits.append(event)
        return self.decision

    async def sleep(self, seconds: float) -> None:  # the fake clock: waits are recorded, not slept
        self.sleeps.append(seconds)
        await asyncio.sleep(0.001)

    def states(self) -> list[ProcessState]:
        return [e.state for e in self.events]


async def test_starting_to_running_then_stopped(tmp_path: Path) -> None:
    h = Harness(tmp_path, "import time; print('up', flush=True); time.sleep(60)", healthy=True)
    h.sup.start()
    task = asyncio.create_task(h.sup.run())
    await wait_for(lambda: h.sup.state == ProcessState.RUNNING, what="RUNNING")
    assert h.sup.pid is not None
    log = tmp_path / "server.log"
    await wait_for(lambda: log.exists() and log.read_text() == "up\n", what="teed output")
    await h.sup.shutdown()
    await task
    assert h.states() == [
        ProcessState.STARTING,
        ProcessState.RUNNING,
        ProcessState.STOPPING,
        ProcessState.STOPPED,
    ]
    assert h.exits == []  # a requested stop is not an exit to decide on


async def test_running_to_exited_after_failed_probes_keeps_the_evidence_first(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, "import time; time.sleep(60)", healthy=True, probe_failures=2)
    h.sup.start()
    task = asyncio.create_task(h.sup.run())
    await wait_for(lambda: h.sup.state == ProcessState.RUNNING, what="RUNNING")
    pid = h.sup.pid
    h.healthy = False  # /health stops answering: the supervisor restarts it on its own
    await wait_for(lambda: bool(h.exits), what="the exit after failed probes")
    assert h.kept == [("2 health probes failed in a row", pid, True)]
    await h.sup.shutdown()
    await task


async def test_exit_zero_after_engine_death_line_is_a_crash(tmp_path: Path) -> None:
    code = "print('vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.')"
    h = Harness(tmp_path, code, healthy=False)
    h.decision = ExitDecision.STOP
    h.sup.start()
    task = asyncio.create_task(h.sup.run())
    await wait_for(lambda: bool(h.exits), what="exit")
    await h.sup.shutdown()
    await task
    (exit_event,) = h.exits
    assert exit_event.exit_code == 0
    assert exit_event.crashed
    assert "engine-death" in exit_event.reason


async def test_clean_exit_zero_is_not_a_crash(tmp_path: Path) -> None:
    h = Harness(tmp_path, "print('bye')", healthy=False)
    h.decision = ExitDecision.STOP
    h.sup.start()
    task = asyncio.create_task(h.sup.run())
    await wait_for(lambda: h.sup.state == ProcessState.STOPPED and bool(h.exits), what="stop")
    await h.sup.shutdown()
    await task
    assert not h.exits[0].crashed


async def test_backoff_to_fatal_after_retries(tmp_path: Path) -> None:
    h = Harness(
        tmp_path,
        "import sys; sys.exit(3)",
        healthy=False,
        start_retries=3,
        backoff_initial=1.0,
        backoff_max=3.0,
    )
    h.sup.start()
    await asyncio.wait_for(h.sup.run_until_idle(), 30)
    assert h.sup.state == ProcessState.FATAL
    assert h.states().count(ProcessState.STARTING) == 4
    assert h.states().count(ProcessState.BACKOFF) == 3
    backoffs = [e.reason for e in h.events if e.state == ProcessState.BACKOFF]
    assert backoffs == ["restarting in 1.0s", "restarting in 2.0s", "restarting in 3.0s"]
    assert all(e.exit_code == 3 and e.crashed for e in h.exits)
    assert "4 consecutive starts failed" in h.sup.fatal_reason


async def test_starting_to_fatal_when_command_missing(tmp_path: Path) -> None:
    h = Harness(tmp_path, "", healthy=False)
    h.sup._spec = lambda: LaunchSpec(("/nonexistent/vllm", "serve"))
    h.sup.start()
    await asyncio.wait_for(h.sup.run_until_idle(), 10)
    assert h.states() == [ProcessState.STARTING, ProcessState.FATAL]
    assert "cannot run '/nonexistent/vllm'" in h.sup.fatal_reason


async def test_sigterm_then_sigkill_after_grace(tmp_path: Path) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "print('ready', flush=True); time.sleep(60)"
    )
    h = Harness(tmp_path, code, healthy=True, stop_grace=0.3)
    h.sup.start()
    task = asyncio.create_task(h.sup.run())
    await wait_for(
        lambda: (
            (tmp_path / "server.log").exists() and "ready" in (tmp_path / "server.log").read_text()
        ),
        what="ready",
    )
    await wait_for(lambda: h.sup.state == ProcessState.RUNNING, what="RUNNING")
    await h.sup.shutdown()
    await task
    stopped = h.events[-1]
    assert stopped.state == ProcessState.STOPPED
    assert stopped.exit_code == -9


def test_backoff_policy() -> None:
    b = Backoff(initial=2.0, cap=10.0)
    assert [b.delay(n) for n in range(1, 6)] == [2.0, 4.0, 8.0, 10.0, 10.0]
