"""The kernel's voice through the systemd journal: ``journalctl -k -o json --follow``.

Where journald runs, it has read ``/dev/kmsg`` already and keeps the kernel's lines across
the ring buffer's wrap; the journal is then the better source (kernel_log.py reads the ring
buffer itself where there is none). ``journalctl`` is run as an argv, never through a shell:

    journalctl -k -o json --follow --no-pager [--after-cursor C | --lines 0]

- ``-k`` (``--dmesg``) is the kernel's messages of this boot only (journalctl(1): it implies
  ``-b`` and the match ``_TRANSPORT=kernel``).
- ``-o json`` prints one JSON object per entry per line (systemd's
  docs/JOURNAL_EXPORT_FORMATS.md, "Journal JSON Format"): every field a string, except a
  field that is not valid UTF-8 (an array of byte values) and one too large to show (null).
  ``__CURSOR`` names the entry for ``--after-cursor``; ``_SOURCE_MONOTONIC_TIMESTAMP`` is the
  kernel's own timestamp of the line, ``__MONOTONIC_TIMESTAMP`` journald's (microseconds since
  boot, systemd.journal-fields(7)); ``__SEQNUM`` (systemd 254 and later) numbers entries.
- The cursor of the last entry handed on is kept in the store (as the kmsg sequence number
  is), so a restarted doctor reads what it missed and nothing twice; a cursor of another
  boot is not passed (``-k`` reads this boot's lines from its start then). With no cursor and
  ``read_from = "end"`` reading starts at the end (``--lines 0``).

Each entry becomes a dmesg-style line (``[ 1234.567890] message``), the form the host rules
are written for, in a chunk of its own (offset: ``__SEQNUM``, else the monotonic time).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Callable, Iterable
from typing import Any

from ascend_doctor.collectors.kernel_log import boot_id
from ascend_doctor.core.events import LogChunk

log = logging.getLogger(__name__)

JOURNAL_DIRS = ("/run/log/journal", "/var/log/journal")
"""Where journald keeps the journal (volatile, persistent): present when either holds one."""
CURSOR_KEY = "kernel_log.journal_cursor"
"""Store meta key of the cursor: ``{"boot": boot id, "cursor": the last entry's __CURSOR}``."""
MAX_PENDING = 1 << 20
"""Bytes of an unfinished line held; beyond them (never a journal entry) it is dropped."""
PROBE_TIMEOUT = 10.0
"""Seconds the start-up probe (``journalctl -k -n 1``) may take."""


def journal_present(dirs: Iterable[str] = JOURNAL_DIRS) -> bool:
    """Whether journald keeps a journal on this host (a directory of journal files)."""
    for d in dirs:
        try:
            with os.scandir(d) as it:
                if any(True for _ in it):
                    return True
        except OSError:
            continue
    return False


def probe(journalctl: str) -> str | None:
    """Why ``journalctl -k`` cannot be read here (None: it can): not run, failed, or no
    journal it may open (journalctl(1) says so on stderr and exits 0)."""
    argv = [journalctl, "-k", "-o", "json", "--lines", "1", "--no-pager", "--quiet"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{journalctl}: {exc}"
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    if done.returncode != 0:
        return f"{journalctl} exited {done.returncode}: {said[-1] if said else ''}".strip()
    if any("insufficient permissions" in s or "No journal files" in s for s in said):
        return f"{journalctl}: {said[0]}"
    return None


class JournalLog:
    """Follows the kernel's journal entries after the cursor; ``commit()`` saves the cursor."""

    lags = True
    """journald reads the kernel's line, then journalctl hands it on: a moment later."""

    def __init__(
        self,
        load: Callable[[], Any],
        save: Callable[[dict[str, Any]], None],
        *,
        journalctl: str = "journalctl",
        read_from: str = "end",
        boot: str | None = None,
    ) -> None:
        self.journalctl = journalctl
        self.path = "journalctl -k"
        self._load, self._save = load, save
        self.read_from = read_from
        self.boot = boot if boot is not None else boot_id()
        self.file_id = f"journal:{self.boot}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._cursor = self._saved = ""
        self._offset = -1
        self._partial = b""
        self.lost = 0
        """Entries that could not be read (not JSON, an unfinished line past MAX_PENDING)."""

    def argv(self) -> list[str]:
        """The command run: after the stored cursor of this boot, else the end or the start."""
        argv = [self.journalctl, "-k", "-o", "json", "--follow", "--no-pager"]
        cursor = self._load()
        if isinstance(cursor, dict) and cursor.get("boot") == self.boot and cursor.get("cursor"):
            self._cursor = self._saved = str(cursor["cursor"])
            return [*argv, "--after-cursor", self._cursor]
        if cursor is None and self.read_from == "end":
            return [*argv, "--lines", "0"]
        return argv

    def open(self) -> bool:
        """Start following; False (one warning) if journalctl cannot be run."""
        try:
            self._proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # the doctor's terminal signals are not its own
            )
        except OSError as exc:
            log.warning(
                "kernel journal: %s cannot run (%s): kernel lines off", self.journalctl, exc
            )
            return False
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        return True

    def poll(self) -> list[LogChunk]:
        """Every entry printed since the last poll, one chunk each."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return []
        out: list[LogChunk] = []
        while True:
            try:
                data = os.read(proc.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            if not data:  # journalctl ended: say so once, and stop reading
                log.warning("kernel journal: journalctl exited (%s): kernel lines off", proc.poll())
                self.close()
                break
            out.extend(self._entries(data))
        return out

    def _entries(self, data: bytes) -> Iterable[LogChunk]:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_PENDING:
            self._partial, self.lost = b"", self.lost + 1
        for line in lines:
            chunk = self._entry(line)
            if chunk is not None:
                yield chunk

    def _entry(self, line: bytes) -> LogChunk | None:
        if not line.strip():
            return None
        try:
            entry = json.loads(line)
            cursor = str(entry["__CURSOR"])
        except (ValueError, KeyError, TypeError):
            self.lost += 1
            return None
        self._cursor = cursor
        message = _bytes(entry.get("MESSAGE"))
        if message is None:
            return None  # too large to show, or none: nothing to match
        usec = _int(entry.get("_SOURCE_MONOTONIC_TIMESTAMP")) or _int(
            entry.get("__MONOTONIC_TIMESTAMP")
        )
        seq = _int(entry.get("__SEQNUM"))
        self._offset = max(self._offset + 1, seq if seq is not None else usec or 0)
        usec = usec or 0
        text = b"[%5d.%06d] %s\n" % (usec // 1_000_000, usec % 1_000_000, message.rstrip(b"\n"))
        return LogChunk(self.path, "host", self._offset, text, file_id=self.file_id)

    def commit(self) -> None:
        """Save the cursor: what was handed on is not read again after a restart."""
        if self._cursor != self._saved:
            self._save({"boot": self.boot, "cursor": self._cursor})
            self._saved = self._cursor

    def close(self) -> None:
        """Stop journalctl."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _bytes(value: Any) -> bytes | None:
    if isinstance(value, str):
        return value.encode("utf-8", "replace")
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value)  # not valid UTF-8: the journal gives its bytes
    return None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


__all__ = ["CURSOR_KEY", "JOURNAL_DIRS", "JournalLog", "journal_present", "probe"]
