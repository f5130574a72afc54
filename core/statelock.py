"""One doctor per state dir: a second ``watch`` on the same state would fight the first
(two supervisors starting servers on one port, two remediators spending one budget).

The lock is ``flock`` on ``doctor.lock`` in the state dir, held for the doctor's life and
released by the kernel when it dies (even by SIGKILL), so a stale lock never needs cleaning.
The file holds the holder's pid, for the second doctor's one-line refusal.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.safeio import private_dir

LOCK_NAME = "doctor.lock"


class StateLocked(DoctorError):
    """Another doctor holds the state dir."""


class HeldLock:
    """The state dir's lock, held until :meth:`close` (or the process's end)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def close(self) -> None:
        """Release the lock."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def lock_state_dir(state_dir: Path) -> HeldLock:
    """Hold the state dir's lock (keep the returned file open; closing it releases the lock);
    :class:`StateLocked`, naming the holder's pid, when another process holds it."""
    try:
        private_dir(state_dir)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(state_dir / LOCK_NAME, flags, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EPERM, errno.EACCES) or not state_dir.is_dir():
            raise
        fd = _read_only_lock(state_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(state_dir)
        os.close(fd)
        raise StateLocked(
            f"another ascend-doctor (pid {holder}) is watching {state_dir}: stop it first,"
            " or give this one another --state-dir"
        ) from None
    with contextlib.suppress(OSError):  # a read-only state dir keeps the last holder's pid
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return HeldLock(fd)


def _holder(state_dir: Path) -> str:
    try:
        with open(state_dir / LOCK_NAME, "rb") as f:
            return f.read(32).decode("ascii", "replace").strip() or "unknown"
    except OSError:
        return "unknown"


def _read_only_lock(state_dir: Path) -> int:
    """A state dir that cannot be written (a read-only mount, an immutable dir) is still held
    by one doctor: ``flock`` works on a file opened for reading, and on the dir itself when
    no lock file was ever made there."""
    path = state_dir / LOCK_NAME
    target = path if path.is_file() else state_dir
    return os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)


__all__ = ["LOCK_NAME", "HeldLock", "StateLocked", "lock_state_dir"]
