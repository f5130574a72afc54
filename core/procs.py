"""Processes as the doctor sees them: is a pid alive, is it still the process it was, and
whose process holds an NPU."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable

_boot: float | None = None

START_TOLERANCE = 1.5
"""Seconds two readings of one process's start time may differ by (``same_process``)."""


def _stat(pid: int) -> tuple[bytes, float] | None:
    """(state letter, start time in epoch seconds) of ``pid`` from ``/proc/<pid>/stat``,
    computed as psutil computes them (the boot time from ``/proc/stat``'s ``btime`` plus the
    start in clock ticks), without importing psutil: ``status`` asks this and nothing else
    of psutil, whose import costs a tenth of the command. Raises ``ProcessLookupError`` when
    there is no such process; None when ``/proc`` cannot tell (no ``/proc``, a ``hidepid``
    mount, an unreadable file): then psutil answers."""
    global _boot
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        if _boot is None:
            with open("/proc/stat", "rb") as f:
                for line in f:
                    if line.startswith(b"btime "):
                        _boot = float(line.split()[1])
                        break
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            raise ProcessLookupError(pid) from None
        return None
    except (OSError, ValueError):
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; field 22 is the start
    fields = raw[raw.rfind(b")") + 2 :].split()
    if _boot is None or len(fields) < 20:
        return None
    try:
        return fields[0], float(fields[19]) / os.sysconf("SC_CLK_TCK") + _boot
    except (ValueError, OSError):
        return None


def pid_alive(pid: int | None) -> bool:
    """Whether a live process has this pid. A zombie (a child that exited and is not reaped
    yet) is not alive; a process we may not inspect (another user's) is."""
    if pid is None or pid <= 0:
        return False
    try:
        seen = _stat(pid)
    except ProcessLookupError:
        return False
    if seen is not None:
        return seen[0] != b"Z"
    import psutil  # here, not at the top: `status` needs none of it

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
        seen = _stat(pid)
    except ProcessLookupError:
        return None
    if seen is not None:
        return seen[1]
    import psutil  # here, not at the top: `status` needs none of it

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def same_process(pid: int | None, start: float) -> bool:
    """Whether ``pid`` is still the process that started at ``start`` (and is alive).

    A start time is the boot time plus the start in clock ticks, and each process reads the
    boot time once from ``/proc/stat``, where the kernel prints it in whole seconds computed
    from the wall clock: two processes (or psutil and this module in one process) may see it
    a second apart after the clock is slewed. So the same process may differ by up to about a
    second; a stranger with the same pid started within that window of a process that has
    since exited needs the pid space to wrap within it. A larger clock step makes the answer
    "not the same" (never stop, never trust it as live), the safe side."""
    began = process_start(pid)
    return began is not None and abs(began - start) < START_TOLERANCE and pid_alive(pid)


async def stop_leftover(pid: int | None, start: float, grace: float) -> bool:
    """Stop a server a dead doctor left running (its process group: SIGTERM, then SIGKILL
    after ``grace`` seconds), when ``pid`` is still that process (same start time: never a
    stranger that reused the pid). True when there was one."""
    import asyncio  # `status` asks whether a pid is alive: it need not load asyncio

    if pid is None or not start:
        return False
    leader = same_process(pid, start)
    # else the API server died with the doctor but its engine core and workers may live on in
    # its group, holding the port and the cards (Linux gives no new process a pid still in use
    # as a group id, so those are the server's)
    if not leader and (pid_alive(pid) or not group_members(pid)):
        return False  # gone, or a stranger reused the pid

    def left() -> bool:
        return same_process(pid, start) if leader else bool(group_members(pid))

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while left() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if left():
            os.killpg(pid, signal.SIGKILL)
    return True


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid``."""
    import psutil  # here, not at the top: `status` needs none of it

    members = []
    for p in psutil.process_iter():
        with contextlib.suppress(ProcessLookupError, PermissionError, psutil.Error):
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                members.append(p.pid)
    return members


def listening_pid(port: int) -> int | None:
    """The PID listening on ``port`` on this host, when this user may see it."""
    import psutil  # here, not at the top: `status` needs none of it

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return int(c.pid)
    return None


# -- whose process holds an NPU -------------------------------------------------------------
# vLLM runs the API server, its engine core and (with tensor parallelism) one worker process
# per card; the process npu-smi lists on a card is the engine core or a worker, never the API
# server. The supervisor starts the server as the leader of its own process group, and vLLM's
# children stay in that group, so a holder is the server's own when its group is, or when one
# of its ancestors is a pid the server had. A child whose API server already died (an engine
# core stuck in the driver after its card lost its heartbeat) is found by its group.


def is_own(pid: int, own: Iterable[int]) -> bool:
    """Whether ``pid`` belongs to the server whose processes have had the pids ``own``."""
    import psutil  # here, not at the top: `status` needs none of it

    mine = set(own)
    if pid in mine:
        return True
    with contextlib.suppress(OSError):
        if os.getpgid(pid) in mine:
            return True
    try:
        return any(parent.pid in mine for parent in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def descendants(pid: int) -> list[int]:
    """The live descendants of ``pid`` (the engine core and workers of an API server)."""
    import psutil  # here, not at the top: `status` needs none of it

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def npu_process(pid: int) -> int:
    """The process of server ``pid`` that runs on the NPU (what msprof attaches to): its first
    ``VLLM::Worker*`` child, else its ``VLLM::EngineCore`` (one rank runs in the engine core),
    else ``pid`` itself (a release that names no process)."""
    import psutil  # here, not at the top: `status` needs none of it

    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return pid
    titles: list[tuple[str, int]] = []
    for kid in kids:
        with contextlib.suppress(psutil.Error):
            titles.append(((kid.cmdline() or [""])[0], kid.pid))
    for prefix in ("VLLM::Worker", "VLLM::EngineCore"):
        for title, kid_pid in sorted(titles):
            if title.startswith(prefix):
                return kid_pid
    return pid


__all__ = [
    "descendants",
    "group_members",
    "is_own",
    "listening_pid",
    "npu_process",
    "pid_alive",
    "process_start",
    "same_process",
    "stop_leftover",
]
