"""The real ``ascend-doctor tui`` in a real terminal (tmux) at 80x24 and 160x48, as over SSH:
what the screen shows is captured as text, keys are typed as a person types them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import poll

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


def tmux(*args: str) -> str:
    return subprocess.run(
        ["tmux", *args], capture_output=True, text=True, timeout=30, check=True
    ).stdout


def running(name: str) -> bool:
    out = subprocess.run(
        ["tmux", "has-session", "-t", name], capture_output=True, timeout=30, check=False
    )
    return out.returncode == 0


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_tui_in_a_real_terminal(state: Path, size: tuple[int, int]) -> None:
    width, height = size
    name = f"h19-{uuid.uuid4().hex[:8]}"
    python = Path(sys.executable)
    command = f"{python} -m ascend_doctor tui --state-dir {state}"
    env = {**os.environ, "TERM": "xterm-256color", "LANG": "C.UTF-8"}
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), command],
        env=env,
        check=True,
        timeout=30,
    )
    try:

        def screen() -> str:
            return tmux("capture-pane", "-p", "-t", name)

        def overview_shown() -> str | None:
            text = screen()
            return text if "incidents" in text and "npu0" in text else None

        overview = poll(overview_shown, 60, "the overview")
        lines = overview.splitlines()
        assert len(lines) <= height and all(len(x) <= width for x in lines)
        assert "ascend-doctor" in lines[0] and "doctor NOT running" in lines[0]
        assert "kv_cache_insufficient" in overview and "device_fault" in overview
        tmux("send-keys", "-t", name, "l")
        poll(lambda: "server.log:" in screen(), 30, "the logs screen")
        # typed in one go, as a person types fast over SSH: all of it is the search
        tmux("send-keys", "-t", name, "/", "q", "a", "p", "r", "Enter")
        poll(lambda: "qapr" in screen() or None, 30, "the search to be typed")
        assert running(name), "a key of the search reached q"
        for _ in range(2):  # clear the search, then back (one Escape at a time, as typed)
            tmux("send-keys", "-t", name, "Escape")
            poll(lambda: "qapr" not in screen() or None, 30, "the search cleared")
        poll(lambda: "npu0" in screen() or None, 30, "back on the overview")
        tmux("send-keys", "-t", name, "q")
        poll(lambda: not running(name), 30, "the TUI to quit")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True, check=False)
