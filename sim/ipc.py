"""Messages between the fake server's processes: JSON lines over an inherited socket.

Real vLLM talks ZMQ between the API server and the engine core and a shared-memory queue to its
workers; what matters to the doctor is only that they are separate processes that block on each
other (a stuck worker stalls the engine's busy loop, and with it ``/start_profile``). A socket
pair passed to the child (``pass_fds``) gives that, and EOF tells a child its parent is gone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

FD_ENV = "ASCEND_SIM_IPC_FD"


class Channel:
    """One end of a socket, sending and receiving one JSON object per line."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._rfile = sock.makefile("rb")
        self._send_lock = threading.Lock()

    def send(self, msg: dict[str, Any]) -> bool:
        """Send ``msg``; False when the other end is gone."""
        data = (json.dumps(msg) + "\n").encode()
        with self._send_lock:
            try:
                self.sock.sendall(data)
            except OSError:
                return False
        return True

    def recv(self) -> dict[str, Any] | None:
        """The next message, or None at EOF (the other process exited)."""
        try:
            line = self._rfile.readline()
        except (OSError, ValueError):
            return None
        if not line:
            return None
        msg: dict[str, Any] = json.loads(line)
        return msg

    def close(self) -> None:
        """Close this end."""
        try:
            self._rfile.close()
            self.sock.close()
        except OSError:
            pass


def spawn(
    module: str, args: Sequence[str], env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], Channel]:
    """Start ``python -m module args...`` with a socket to it; stdout/stderr are inherited.

    The child joins our process group, like a multiprocessing child of vLLM."""
    parent, child = socket.socketpair()
    child_env = {**os.environ, **(env or {}), FD_ENV: str(child.fileno())}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env=child_env,
        pass_fds=(child.fileno(),),
        stdin=subprocess.DEVNULL,
    )
    child.close()
    return proc, Channel(parent)


def inherited() -> Channel:
    """The channel to the parent, from the fd named in the environment."""
    fd = int(os.environ[FD_ENV])
    return Channel(socket.socket(fileno=fd))
