"""Whose process holds an NPU: the server's own tree (by group or ancestry) or another job."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

from ascend_doctor.core.procs import (
    descendants,
    group_members,
    is_own,
    npu_process,
    process_start,
    stop_leftover,
)
from ascend_doctor.core.procs import pid_alive as alive


def test_children_and_group_members_are_the_servers_own() -> None:
    # a "server" leading its own group, with a child that stays in it (like VLLM::EngineCore)
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print(c.pid, flush=True)\ntime.sleep(30)\n"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True, text=True
    )
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert server.stdout is not None
        child = int(server.stdout.readline())
        assert is_own(child, {server.pid})
        assert descendants(server.pid) == [child]
        assert not is_own(stranger.pid, {server.pid})
        assert npu_process(server.pid) == server.pid  # no VLLM:: titles: the server itself
        os.kill(server.pid, 9)
        server.wait()
        assert alive(child) and is_own(child, {server.pid})  # orphaned, still in the group
    finally:
        os.killpg(server.pid, 9)
        server.wait()
        assert server.stdout is not None
        server.stdout.close()
        stranger.kill()
        stranger.wait()


async def test_a_dead_servers_group_is_stopped_but_a_strangers_pid_is_not() -> None:
    # a "server": a group leader that leaves a child (its engine core) and is then killed
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    leader = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    start = process_start(leader.pid)
    assert start is not None
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait()
    leader.stdout.close()
    assert group_members(leader.pid) == [child]  # the orphan lives on in the dead leader's group
    assert await stop_leftover(leader.pid, start, grace=5.0)
    deadline = time.monotonic() + 10
    while group_members(leader.pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert group_members(leader.pid) == []
    # a live process that is not the one recorded (a reused pid) is never touched
    me = os.getpid()
    assert not await stop_leftover(me, 1.0, grace=0.1)
