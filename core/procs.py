"""Processes as the doctor sees them: is a pid alive, and is it still the process it was."""

from __future__ import annotations

import psutil


def pid_alive(pid: int | None) -> bool:
    """Whether a live process has this pid. A zombie (a child that exited and is not reaped
    yet) is not alive; a process we may not inspect (another user's) is."""
    if pid is None or pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # it exists; it is someone else's


def process_start(pid: int | None) -> float | None:
    """The kernel's start time of a process (epoch seconds), None when there is none: with the
    pid it names one process, whatever later reuses the pid."""
    if pid is None or pid <= 0:
        return None
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def same_process(pid: int | None, start: float) -> bool:
    """Whether ``pid`` is still the process that started at ``start`` (and is alive)."""
    began = process_start(pid)
    return began is not None and abs(began - start) < 0.05 and pid_alive(pid)


__all__ = ["pid_alive", "process_start", "same_process"]
