"""Issue 15, point 3: a local user holding hundreds of half-sent connections to the loopback
OTLP receiver must not stop supervision, and SIGTERM always ends the doctor."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascend_doctor.cli.demo import free_port
from ascend_doctor.core.events import ProcessState
from ascend_doctor.core.httpd import HttpServer, Request, Response
from tests.conftest import alive, poll
from tests.integration.test_remediation_live import CONFIG, doctor_for, serve

FD_LIMIT = 256


async def _ok(req: Request) -> Response:
    return Response(200, b"ok\n")


async def test_half_sent_requests_hold_at_most_the_cap_and_time_out() -> None:
    rejected: list[str] = []
    server = HttpServer(
        _ok, max_body=1024, on_reject=rejected.append, max_connections=8, read_timeout=0.3
    )
    host, port = await server.start("127.0.0.1", 0)
    held = []
    for _ in range(40):
        r, w = await asyncio.open_connection(host, port)
        w.write(b"POST /v1/traces HTTP/1.1\r\nContent-Length: 100\r\n\r\nab")  # never finished
        await w.drain()
        held.append((r, w))
    deadline = time.monotonic() + 10
    while rejected.count("too_many_connections") < 32 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(server._conns) <= 8
    assert rejected.count("too_many_connections") >= 32
    # the read timeout frees the slots: a real request is served again
    while server._conns and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    r, w = await asyncio.open_connection(host, port)
    w.write(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert (await asyncio.wait_for(r.read(), 5)).startswith(b"HTTP/1.1 200")
    for _, hw in [*held, (r, w)]:
        hw.close()
    await server.close()


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


@pytest.mark.integration
def test_a_thousand_half_sent_connections_do_not_stop_supervision(tmp_path: Path) -> None:
    receiver = free_port()
    config = CONFIG + f'\n[tracing]\nreceiver = true\nreceiver_address = "127.0.0.1:{receiver}"\n'
    with doctor_for(tmp_path, config) as (doc, host):
        argv, env = serve(host, 1, "--max-model-len", "8192")
        cmd = [sys.executable, "-m", "ascend_doctor", "watch", "--config", str(doc.cfg),
               "--state-dir", str(doc.state), "--", *argv]  # fmt: skip
        with open(tmp_path / "doctor.out", "ab") as out:
            doc.proc = subprocess.Popen(
                cmd, env={**os.environ, **host.env(), **env}, stdout=out,
                stderr=subprocess.STDOUT, preexec_fn=_limit_fds,
            )  # fmt: skip
        first = poll(
            lambda: (m := doc.read(lambda s: s.server())) and m.state == ProcessState.RUNNING and m,
            60,
            "the server to be healthy",
        )
        socks = []
        try:
            for _ in range(1000):
                s = socket.create_connection(("127.0.0.1", receiver), timeout=5)
                s.sendall(b"POST /v1/traces HTTP/1.1\r\nContent-Length: 100000\r\n\r\nx")
                socks.append(s)
        except OSError:
            pass  # the doctor closes what it will not serve; enough are held
        assert len(socks) >= 300
        # while they are held, the server dies: the doctor must see it and start it again
        os.kill(first.pid, signal.SIGKILL)
        poll(
            lambda: (
                (m := doc.read(lambda s: s.server()))
                and m.state == ProcessState.RUNNING
                and m.pid != first.pid
            ),
            90,
            "the doctor to restart the killed server while the connections are held",
        )
        assert doc.proc.poll() is None, doc.log()[-3000:]
        t0 = time.monotonic()
        assert doc.stop() == 0
        assert time.monotonic() - t0 < 30, "SIGTERM ended the doctor"
        for s in socks:
            s.close()
        events = doc.read(lambda s: s.process_events(limit=1000)) or []
        poll(lambda: not any(alive(e.pid) for e in events if e.pid), 30, "no orphan")
