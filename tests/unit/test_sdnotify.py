"""core/sdnotify.py against a real NOTIFY_SOCKET: a unix datagram socket, as systemd binds."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_doctor.core.sdnotify import Notifier, Watchdog, announce_ready, failed_task


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setblocking(False)
    yield path, sock
    sock.close()


def received(sock: socket.socket) -> list[str]:
    """Every datagram waiting on the socket now."""
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def test_environment_is_read_as_systemd_sets_it() -> None:
    n = Notifier.from_environ(
        {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}, pid=42
    )
    assert n.enabled and n.watchdog_interval == 15.0
    # the watchdog is another process's (a parent that passed its environment on)
    other = Notifier.from_environ({"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000",
                                   "WATCHDOG_PID": "41"}, pid=42)  # fmt: skip
    assert other.enabled and other.watchdog_interval is None
    bad = Notifier.from_environ({"WATCHDOG_USEC": "abc", "NOTIFY_SOCKET": "/x"})
    assert bad.watchdog_usec is None
    off = Notifier.from_environ({})
    assert not off.enabled and off.watchdog_interval is None
    assert off.notify("READY=1") is False


def test_messages_arrive_as_one_datagram_each(listener: tuple[str, socket.socket]) -> None:
    path, sock = listener
    n = Notifier(path)
    assert n.notify("READY=1", "STATUS=supervising")
    assert n.notify("STATUS=server RUNNING\nREADY=1")  # a newline cannot forge a field
    assert received(sock) == ["READY=1\nSTATUS=supervising", "STATUS=server RUNNING READY=1"]
    assert n.sent == 2
    n.close()


def test_abstract_socket_address(tmp_path: Path) -> None:
    name = f"ascend-doctor-test-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    try:
        n = Notifier("@" + name)
        assert n.notify("WATCHDOG=1")
        assert sock.recv(100) == b"WATCHDOG=1"
        n.close()
    finally:
        sock.close()


def test_a_missing_socket_is_logged_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    n = Notifier(str(tmp_path / "nobody"))
    assert not n.notify("READY=1") and not n.notify("WATCHDOG=1")
    n.close()
    assert len([r for r in caplog.records if "notify failed" in r.getMessage()]) == 1
    assert not Notifier("vsock:2:1234").notify("READY=1")


def test_ready_waits_for_every_first_run(listener: tuple[str, socket.socket]) -> None:
    path, sock = listener

    async def main() -> None:
        first = [asyncio.Event(), asyncio.Event()]
        notifier = Notifier(path)
        task = asyncio.create_task(announce_ready(notifier, first, "supervising"))
        first[0].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert received(sock) == []  # one collector has not run yet
        first[1].set()
        await asyncio.wait_for(task, 5)
        assert received(sock) == ["READY=1\nSTATUS=supervising"]
        notifier.close()

    asyncio.run(main())


async def _pings(sock: socket.socket, n: int) -> list[str]:
    """Wait (on the loop) until ``n`` datagrams arrived."""
    got: list[str] = []
    deadline = time.monotonic() + 10
    while len(got) < n:
        assert time.monotonic() < deadline, got
        got += received(sock)
        await asyncio.sleep(0.005)
    return got


def test_a_stuck_loop_sends_no_pings(listener: tuple[str, socket.socket]) -> None:
    path, sock = listener

    async def main() -> None:
        dog = Watchdog(notifier := Notifier(path), 0.01, list)
        task = asyncio.create_task(dog.run())
        assert set(await _pings(sock, 3)) == {"WATCHDOG=1"}
        received(sock)
        # the loop is wedged (a blocking call on it): nothing can ping while it is
        time.sleep(0.3)
        assert received(sock) == []
        # free again: the pings come back
        assert "WATCHDOG=1" in await _pings(sock, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        notifier.close()

    asyncio.run(main())


def test_a_dead_task_stops_the_pings(listener: tuple[str, socket.socket]) -> None:
    path, sock = listener

    async def main() -> None:
        go = asyncio.Event()

        async def part() -> None:
            await go.wait()
            raise RuntimeError("decider crashed")

        async def ends_on_purpose() -> None:
            return None

        tasks = [asyncio.create_task(part(), name="decide"),
                 asyncio.create_task(ends_on_purpose(), name="npu_smi")]  # fmt: skip
        dog = Watchdog(notifier := Notifier(path), 0.01, lambda: tasks)
        watch = asyncio.create_task(dog.run())
        await _pings(sock, 2)  # a task that returned does not stop them
        go.set()
        await asyncio.wait_for(watch, 5)  # the watchdog gives up by itself
        assert "decide" in dog.stopped and "decider crashed" in dog.stopped
        assert watch.done() and not watch.cancelled()  # ended: nothing pings any more
        notifier.close()

    asyncio.run(main())


def test_failed_task_ignores_cancelled_ones() -> None:
    async def main() -> None:
        t = asyncio.create_task(asyncio.sleep(10))
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert failed_task([t]) is None

    asyncio.run(main())
