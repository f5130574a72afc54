"""Attach mode's view of a server it does not own: real processes for the PIDs, a scripted
/health, a fake clock; no waiting on real time."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_doctor.agent.attach import AttachedServer, AttachSpec, silent_finding
from ascend_doctor.agent.supervisor import ExitDecision
from ascend_doctor.core.config import ServerConfig
from ascend_doctor.core.errors import ConfigError
from ascend_doctor.core.events import Category, ProcessEvent, ProcessState, Role


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_attach_spec_is_validated() -> None:
    spec = AttachSpec.parse("http://127.0.0.1:8000/", 42, "systemctl restart 'vllm x'")
    assert (spec.url, spec.port, spec.restart_command) == (
        "http://127.0.0.1:8000",
        8000,
        ("systemctl", "restart", "vllm x"),
    )
    with pytest.raises(ConfigError, match="--url"):
        AttachSpec.parse("127.0.0.1:8000", None, None)
    with pytest.raises(ConfigError, match="--restart-command"):
        AttachSpec.parse("http://h:1", None, "systemctl 'unclosed")
    with pytest.raises(ConfigError, match="--pid"):
        AttachSpec.parse("http://h:1", 0, None)


async def test_a_server_restarted_by_its_manager_is_followed_again(tmp_path: Path) -> None:
    first = sleeper()
    health = {"ok": True}
    events: list[ProcessEvent] = []
    exits: list[ProcessEvent] = []

    async def probe() -> bool:
        return health["ok"]

    async def on_exit(event: ProcessEvent) -> ExitDecision:
        exits.append(event)
        return ExitDecision.BACKOFF

    async def tick(_: float) -> None:
        await asyncio.sleep(0)

    server = AttachedServer(
        AttachSpec("http://127.0.0.1:1", first.pid),
        ServerConfig(probe_failures=2),
        probe=probe,
        on_change=events.append,
        on_exit=on_exit,
        command_timeout=5,
        sleep=tick,
    )
    runner = asyncio.create_task(server.run())
    try:

        async def until(cond: object, what: str) -> None:
            for _ in range(10_000):
                if callable(cond) and cond():
                    return
                await asyncio.sleep(0)
            raise AssertionError(what)

        await until(lambda: server.state == ProcessState.RUNNING, "running")
        assert server.pid == first.pid
        health["ok"] = False
        first.kill()
        first.wait()
        await until(lambda: exits, "the exit to be seen")
        assert exits[0].reason == f"pid {first.pid} exited" and exits[0].pid == first.pid
        assert server.state == ProcessState.STARTING  # the manager brings it back
        health["ok"] = True  # ... and it did, with a new pid the doctor was not told
        await until(lambda: server.state == ProcessState.RUNNING, "running again")
        assert [e.state for e in events][-3:] == [
            ProcessState.EXITED,
            ProcessState.STARTING,
            ProcessState.RUNNING,
        ]
        assert server.restarts == 0  # no restart command: the doctor restarted nothing
        assert not server.can_restart
    finally:
        await server.shutdown()
        await asyncio.wait_for(runner, 5)
        if first.poll() is None:
            first.kill()


async def test_nothing_answering_is_said_at_once_and_is_down_after_the_start_timeout() -> None:
    now = [1000.0]
    events: list[ProcessEvent] = []
    exits: list[ProcessEvent] = []

    async def probe() -> bool:
        return False  # nothing listens at the URL

    async def on_exit(event: ProcessEvent) -> ExitDecision:
        exits.append(event)
        return ExitDecision.BACKOFF

    async def tick(seconds: float) -> None:
        now[0] += seconds
        await asyncio.sleep(0)

    server = AttachedServer(
        AttachSpec("http://127.0.0.1:1", None),
        ServerConfig(start_timeout=30.0, health_interval=1.0),
        probe=probe,
        on_change=events.append,
        on_exit=on_exit,
        command_timeout=5,
        wall=lambda: now[0],
        sleep=tick,
    )
    runner = asyncio.create_task(server.run())
    try:
        for _ in range(10_000):
            if exits:
                break
            await asyncio.sleep(0)
        first = events[0]
        assert first.state == ProcessState.STARTING and first.at == 1000.0  # at once
        assert first.reason == "nothing answers at http://127.0.0.1:1"
        (down,) = exits
        assert down.previous == ProcessState.STARTING and down.crashed
        assert down.reason == "no answer at http://127.0.0.1:1 for 30s"
        assert 1030.0 < down.at <= 1032.0
        finding = silent_finding(down)  # what the daemon opens the incident with
        assert finding.category == Category.SERVER_CRASHED and finding.role == Role.ROOT
        for _ in range(200):
            await asyncio.sleep(0)
        assert len(exits) == 1, "said once, not every start_timeout"
    finally:
        await server.shutdown()
        await asyncio.wait_for(runner, 5)
