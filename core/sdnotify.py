"""systemd's notify protocol, spoken with a plain datagram socket (``sd_notify(3)``).

Under ``Type=notify`` systemd sets ``NOTIFY_SOCKET`` and waits for ``READY=1``; with
``WatchdogSec=`` it also sets ``WATCHDOG_USEC`` (and ``WATCHDOG_PID``) and restarts the
service when ``WATCHDOG=1`` does not come at least that often. The doctor says READY once
its first log pass and its collectors' first runs are done, and pings the watchdog from a
task on the event loop that runs everything else: a loop that is stuck sends nothing, and a
part that died on an exception stops the pings on purpose, so systemd restarts the doctor.
Outside systemd (no ``NOTIFY_SOCKET``) every call is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence

log = logging.getLogger(__name__)

NOTIFY_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
"""What systemd sets for the doctor alone: never passed on to the server it starts."""


class Notifier:
    """Sends notify messages to systemd; never raises, never blocks."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec
        self.sent = 0
        """Messages systemd's socket took."""
        self._sock: socket.socket | None = None
        self._failing = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], pid: int | None = None) -> Notifier:
        """From systemd's variables; ``WATCHDOG_USEC`` counts only when ``WATCHDOG_PID`` is
        unset or this process (``pid``, default ours)."""
        address = environ.get("NOTIFY_SOCKET") or None
        usec: int | None = None
        raw = environ.get("WATCHDOG_USEC", "")
        owner = environ.get("WATCHDOG_PID", "")
        mine = not owner or owner == str(os.getpid() if pid is None else pid)
        if raw.isdigit() and int(raw) > 0 and mine:
            usec = int(raw)
        return cls(address, usec)

    @property
    def enabled(self) -> bool:
        """Whether systemd listens."""
        return self.address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between pings: half the watchdog timeout, as sd_watchdog_enabled(3)
        advises; None without a watchdog."""
        if self.address is None or self.watchdog_usec is None:
            return None
        return self.watchdog_usec / 2_000_000

    def _target(self) -> str | bytes:
        assert self.address is not None
        # "@name" is an abstract socket: a leading NUL byte on the wire
        if self.address.startswith("@"):
            return b"\0" + self.address[1:].encode()
        return self.address

    def notify(self, *fields: str) -> bool:
        """Send ``KEY=value`` fields as one message; False when not sent (logged once per
        failure streak)."""
        if self.address is None:
            return False
        # a newline inside a value would start a field of its own
        text = "\n".join(f.replace("\n", " ") for f in fields)
        try:
            if self._sock is None:
                if not self.address.startswith(("/", "@")):
                    raise OSError(f"unsupported NOTIFY_SOCKET address {self.address!r}")
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
            self._sock.sendto(text.encode(), self._target())
        except OSError as exc:
            if not self._failing:
                log.warning("systemd notify failed (%s): %s", text.split("\n")[0], exc)
            self._failing = True
            return False
        if self._failing:
            log.info("systemd notify works again")
        self._failing = False
        self.sent += 1
        return True

    def close(self) -> None:
        """Release the socket."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None


async def announce_ready(notifier: Notifier, waits: Sequence[asyncio.Event], status: str) -> None:
    """``READY=1`` once every event in ``waits`` is set (the collectors' first runs)."""
    await asyncio.gather(*(e.wait() for e in waits))
    notifier.notify("READY=1", f"STATUS={status}")
    log.info("ready: %s", status)


def failed_task(tasks: Iterable[asyncio.Task[object]]) -> asyncio.Task[object] | None:
    """The first task that ended on an exception (cancelled or returned ones do not count:
    a collector whose binary is missing ends on purpose)."""
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            return task
    return None


class Watchdog:
    """Pings systemd's watchdog every ``interval`` seconds from the event loop while every
    watched task is alive."""

    def __init__(
        self,
        notifier: Notifier,
        interval: float,
        tasks: Callable[[], Iterable[asyncio.Task[object]]],
    ) -> None:
        self.notifier = notifier
        self.interval = interval
        self.tasks = tasks
        self.pings = 0
        """Pings sent."""
        self.stopped = ""
        """Why the pings stopped ("" while they go on)."""

    async def run(self) -> None:
        """Ping until cancelled, or until a watched task dies."""
        while True:
            dead = failed_task(self.tasks())
            if dead is not None:
                self.stopped = f"task {dead.get_name()} failed: {dead.exception()!r}"
                log.error("watchdog: %s; no more pings, systemd will restart the doctor",
                          self.stopped)  # fmt: skip
                return
            if self.notifier.notify("WATCHDOG=1"):
                self.pings += 1
            await asyncio.sleep(self.interval)


def systemd_tasks(
    notifier: Notifier,
    waits: Sequence[asyncio.Event],
    status: str,
    tasks: Callable[[], Iterable[asyncio.Task[object]]],
) -> list[asyncio.Task[None]]:
    """What speaks to systemd: ``READY=1`` once ``waits`` are set, and, under ``WatchdogSec=``,
    watchdog pings while every task of ``tasks()`` lives. None outside systemd."""
    if not notifier.enabled:
        return []
    out = [asyncio.create_task(announce_ready(notifier, waits, status), name="ready")]
    if notifier.watchdog_interval is not None:
        dog = Watchdog(notifier, notifier.watchdog_interval, tasks)
        out.append(asyncio.create_task(dog.run(), name="watchdog"))
    return out


__all__ = [
    "NOTIFY_VARS",
    "Notifier",
    "Watchdog",
    "announce_ready",
    "failed_task",
    "systemd_tasks",
]
