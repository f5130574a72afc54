"""Whose process holds an NPU: the server's own tree (by group or ancestry) or another job."""

from __future__ import annotations

import os
import subprocess
import sys

from ascend_doctor.core.procs import descendants, is_own, npu_process
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
