"""``watch`` under ``Type=notify``: a real doctor process, a real NOTIFY_SOCKET.

The test plays systemd's part: it binds the unix datagram socket, starts the doctor with
``NOTIFY_SOCKET`` and ``WATCHDOG_USEC`` as systemd sets them, and reads what arrives.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_doctor.cli.demo import free_port
from ascend_doctor.core.events import ProcessState
from ascend_doctor.sim.host import SimHost
from tests.conftest import poll, read_store

pytestmark = pytest.mark.integration

CONFIG = """
[server]
start_timeout = 60
probe_interval = 0.5
stop_grace = 5
echo = false

[collectors.npu_smi]
interval = 0.5
"""


@pytest.fixture
def notify_socket() -> Iterator[tuple[str, socket.socket]]:
    # a short directory: a unix socket path must fit in 108 bytes
    folder = tempfile.mkdtemp(prefix="sdn")
    path = os.path.join(folder, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setblocking(False)
    yield path, sock
    sock.close()
    shutil.rmtree(folder)


class Messages:
    """What systemd would have received, in order."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.items: list[str] = []

    def read(self) -> list[str]:
        while True:
            try:
                self.items.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return self.items

    def index(self, field: str) -> int | None:
        for i, msg in enumerate(self.read()):
            if field in msg.split("\n"):
                return i
        return None


def test_ready_after_first_pass_and_probes_then_watchdog_pings(
    tmp_path: Path, notify_socket: tuple[str, socket.socket]
) -> None:
    path, sock = notify_socket
    host = SimHost.create(tmp_path / "host", load_seconds=0.2)
    state = tmp_path / "state"
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(CONFIG)
    port = free_port()
    argv = host.serve_argv("Qwen/Qwen2.5-7B-Instruct", ["--host", "127.0.0.1", "--port", str(port)])
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_")}
    env.update(host.env())
    env.update(NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")  # pings every 0.2 s
    cmd = [sys.executable, "-m", "ascend_doctor", "watch", "--config", str(cfg),
           "--state-dir", str(state), "--", *argv]  # fmt: skip
    msgs = Messages(sock)
    out = open(tmp_path / "doctor.out", "wb")
    doctor = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        ready = poll(lambda: msgs.index("READY=1") is not None, 60, "READY=1")
        assert ready
        # by then the first log pass (the doctor's record) and npu-smi's first run are done
        status = read_store(state, lambda s: (s.doctor(), s.collectors().get("npu_smi")))
        assert status is not None
        doctor_status, npu_smi = status
        assert doctor_status is not None and doctor_status.pid == doctor.pid
        assert npu_smi is not None and npu_smi.runs >= 1
        ready_at = msgs.index("READY=1")
        assert ready_at is not None
        assert "STATUS=supervising" in msgs.items[ready_at].split("\n")
        # the watchdog pings go on, from the doctor's loop
        poll(lambda: msgs.read().count("WATCHDOG=1") >= 3, 30, "three watchdog pings")
        poll(lambda: "STATUS=server RUNNING" in msgs.read(), 60, "the server's state")
        # the server is the doctor's child, not systemd's: it never sees the socket
        server = read_store(state, lambda s: s.server())
        assert server is not None and server.state == ProcessState.RUNNING
        assert server.pid is not None
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
        names = {item.split(b"=", 1)[0] for item in environ}
        assert not names & {b"NOTIFY_SOCKET", b"WATCHDOG_USEC", b"WATCHDOG_PID"}
        # (a wedged loop or a dead part stops the pings: tests/unit/test_sdnotify.py)
        doctor.send_signal(signal.SIGTERM)
        assert doctor.wait(timeout=60) == 0
    finally:
        if doctor.poll() is None:
            doctor.kill()
            doctor.wait()
        out.close()
    assert msgs.index("STOPPING=1") is not None
    assert msgs.index("STOPPING=1") > (msgs.index("READY=1") or 0)
