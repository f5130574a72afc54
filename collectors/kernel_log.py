"""The host kernel's own voice: ``/dev/kmsg`` read from a persisted cursor.

The OOM killer ends a server with SIGKILL and the server says nothing; only the kernel does
(``Out of memory: Killed process N (...)``). ``/dev/kmsg`` gives one record per ``read()``
(Documentation/ABI/testing/dev-kmsg): ``<prio>,<seq>,<usec>,<flags>;<message>`` followed by
continuation lines that start with a space (key=value dictionary) and are skipped here. Each
record becomes a dmesg-style line (``[ 1234.567890] message``), the form the host rules
(rules/packs/host.yaml) are written for, in a chunk of its own whose offset is the record's
sequence number: (boot id, seq) names one kernel line for ever, so findings are deduplicated
by it and the cursor saved after them means a restarted doctor does not read a line twice.

- A cursor of another boot (sequence numbers restart at boot) is ignored: everything the ring
  buffer still holds was written while the doctor was away and is read.
- With no cursor at all (the doctor's very first start) and ``read_from = "end"``, reading
  starts at the end of the ring buffer, as the tailer does with files.
- ``EPIPE`` means records were overwritten before they were read: counted, reading goes on.
- Where ``/dev/kmsg`` is unreadable (a container without it, no CAP_SYSLOG under
  ``dmesg_restrict``) the source is off with one warning; the kernel's log files
  (:data:`FALLBACK_FILES`) are then followed by the tailer instead, when readable. Where the
  systemd journal is kept, it is read before either (kernel_journal.py; the order is
  kernel_sources.py's).
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import psutil

from ascend_doctor.collectors.log_files import Source, source_kind
from ascend_doctor.core import regex
from ascend_doctor.core.events import Finding, LogChunk

log = logging.getLogger(__name__)

KMSG = "/dev/kmsg"
"""The kernel's ring buffer as a stream of records."""
FALLBACK_FILES = ("/var/log/kern.log", "/var/log/messages")
"""Where syslog writes the kernel's lines (Debian/Ubuntu, RHEL/SUSE), followed when /dev/kmsg
cannot be read."""
CURSOR_KEY = "kernel_log.cursor"
"""Store meta key of the cursor: ``{"boot": boot id, "seq": last sequence number read}``."""
READ_SIZE = 16384
"""Bytes per read: one record of /dev/kmsg is at most 8 KiB (CONSOLE_EXT_LOG_MAX)."""

_RECORD = regex.compile(rb"^(\d+),(\d+),(\d+),[^;\n]*;(.*)$")


def boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> str:
    """This boot's id (sequence numbers of /dev/kmsg are only unique within a boot)."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def fallback_sources(files: Iterable[str] = FALLBACK_FILES) -> list[Source]:
    """The kernel's log files that can be read, as tailer sources of kind ``host``."""
    return [Source(p, "host") for p in files if os.access(p, os.R_OK)]


class KernelLog:
    """Reads kernel records newer than the cursor; ``commit()`` saves the cursor."""

    lags = False
    """A record is readable the moment the kernel printed it."""

    def __init__(
        self,
        load: Callable[[], Any],
        save: Callable[[dict[str, Any]], None],
        *,
        path: str = KMSG,
        read_from: str = "end",
        boot: str | None = None,
    ) -> None:
        self.path = path
        self._load = load
        self._save = save
        self.read_from = read_from
        self.boot = boot if boot is not None else boot_id()
        self.file_id = f"kmsg:{self.boot}"
        self._fd: int | None = None
        self._seq = -1  # the last sequence number handed on
        self._saved = -1
        self._partial = b""
        self.lost = 0
        """Records overwritten in the ring buffer before they were read."""

    def open(self) -> bool:
        """Open the source and place it after the cursor; False (one warning) if unreadable."""
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            log.warning("kernel log %s is not readable (%s): kernel lines off", self.path, exc)
            return False
        cursor = self._load()
        if isinstance(cursor, dict) and cursor.get("boot") == self.boot:
            self._seq = self._saved = int(cursor.get("seq", -1))
        elif cursor is None and self.read_from == "end":
            os.lseek(self._fd, 0, os.SEEK_END)
        return True

    def poll(self) -> list[LogChunk]:
        """Every record written since the last poll, one chunk each (offset = its seq)."""
        if self._fd is None:
            return []
        out: list[LogChunk] = []
        while True:
            try:
                data = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.lost += 1
                    continue
                if exc.errno == errno.EINVAL:  # a record longer than READ_SIZE: skip it
                    continue
                raise
            if not data:
                break  # a regular file (tests, a copied buffer) at its end
            out.extend(self._records(data))
        return out

    def _records(self, data: bytes) -> Iterable[LogChunk]:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            m = _RECORD.match(line)
            if m is None:
                continue  # a continuation line (" SUBSYSTEM=...") or noise
            seq, usec = int(m.group(2)), int(m.group(3))
            if seq <= self._seq:
                continue
            self._seq = seq
            text = b"[%5d.%06d] %s\n" % (usec // 1_000_000, usec % 1_000_000, m.group(4))
            yield LogChunk(self.path, "host", seq, text, file_id=self.file_id)

    def commit(self) -> None:
        """Save the cursor: what was handed on is not read again after a restart."""
        if self._seq != self._saved:
            self._save({"boot": self.boot, "seq": self._seq})
            self._saved = self._seq

    def close(self) -> None:
        """Release the descriptor."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class PidBook:
    """The server's processes seen lately, so that a kernel line about a pid can be told to
    be the server's after that process is gone (the OOM killer's victim is usually a worker,
    a child of the process the doctor started)."""

    def __init__(
        self,
        every: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        roots: Callable[[], Iterable[int]] = tuple,
    ) -> None:
        self.every = every
        self._clock = clock
        self._roots = roots  # the server's own pids now: never missed between two walks
        self._last = -every
        self.pids: set[int] = set()
        """Every pid of the server's trees seen since the doctor started."""

    def note(self, roots: Iterable[int]) -> None:
        """Walk the trees of ``roots`` (at most every ``every`` seconds)."""
        now = self._clock()
        if now - self._last < self.every:
            return
        self._last = now
        for pid in roots:
            if pid <= 0:
                continue
            self.pids.add(pid)
            try:
                self.pids.update(p.pid for p in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                continue

    def about_server(self, finding: Finding) -> bool:
        """False for a kernel line naming a pid that was never the server's (another
        process's OOM kill or segfault is not the server's failure); True otherwise, and
        while no server process is known (nothing to tell it by)."""
        pid = finding.captures.get("pid")
        if not pid or not pid.isdigit() or source_kind(finding.path) != "host":
            return True
        # a server started since the last walk (at most ``every`` ago) is known by its roots
        self.pids.update(p for p in self._roots() if p > 0)
        return not self.pids or int(pid) in self.pids


__all__ = [
    "CURSOR_KEY",
    "FALLBACK_FILES",
    "KMSG",
    "KernelLog",
    "PidBook",
    "boot_id",
    "fallback_sources",
]
