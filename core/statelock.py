"""One doctor per state dir: a second ``watch`` on the same state would fight the first
(two supervisors starting servers on one port, two remediators spending one budget).

The lock is ``flock`` on ``doctor.lock`` in the state dir, held for the doctor's life and
released by the kernel when it dies (even by SIGKILL), so a stale lock never needs cleaning.
The file holds the holder's pid, for the second doctor's one-line refusal.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import BinaryIO

from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.safeio import private_dir

LOCK_NAME = "doctor.lock"


class StateLocked(DoctorError):
    """Another doctor holds the state dir."""


def lock_state_dir(state_dir: Path) -> BinaryIO:
    """Hold the state dir's lock (keep the returned file open; closing it releases the lock);
    :class:`StateLocked`, naming the holder's pid, when another process holds it."""
    private_dir(state_dir)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fh = os.fdopen(os.open(state_dir / LOCK_NAME, flags, 0o600), "r+b", buffering=0)
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = fh.read(32).decode("ascii", "replace").strip() or "unknown"
        fh.close()
        raise StateLocked(
            f"another ascend-doctor (pid {holder}) is watching {state_dir}: stop it first,"
            " or give this one another --state-dir"
        ) from None
    fh.truncate(0)
    fh.write(f"{os.getpid()}\n".encode())
    return fh


__all__ = ["LOCK_NAME", "StateLocked", "lock_state_dir"]
