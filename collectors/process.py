"""The ``process`` collector: psutil over the supervised server's process tree and the host.

One :class:`Sample` for the server (the pid and all its descendants: RSS, CPU %, threads,
open files, children) and one for the host (available memory, memory %, load average).
psutil reads ``/proc`` synchronously, so every read runs in ``asyncio.to_thread``.

CPU % is the delta of the tree's summed ``cpu_times`` (user + system) between two runs over
the wall time between them, in percent of one CPU (400 means four busy cores). The first run
after a (re)start has no previous value and reports ``cpu_percent = None``. Processes of the
tree that end between runs only make the delta smaller; it never goes negative.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from ascend_doctor.collectors.base import CollectorSpec
from ascend_doctor.collectors.trend import Trend
from ascend_doctor.core.events import Sample

COLLECTOR = "process"
"""The registered collector name, used as ``Sample.collector``."""


@dataclass(frozen=True, slots=True)
class TreeStats:
    """What one walk of a process tree found."""

    pid: int
    """The root pid."""
    alive: bool
    """False when the root pid no longer exists (or is a zombie)."""
    rss_bytes: int = 0
    """Resident memory summed over the tree."""
    cpu_seconds: float = 0.0
    """User plus system CPU time summed over the tree."""
    threads: int = 0
    """Threads summed over the tree."""
    open_files: int | None = 0
    """Open regular files summed over the tree; None when no process allowed the read."""
    children: int = 0
    """Descendants of the root (recursive), not counting the root."""


def tree_stats(pid: int) -> TreeStats:
    """Walk ``pid`` and its descendants (blocking). A gone root gives ``alive=False``."""
    try:
        root = psutil.Process(pid)
        if root.status() == psutil.STATUS_ZOMBIE:
            return TreeStats(pid=pid, alive=False)
        kids = root.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return TreeStats(pid=pid, alive=False)
    except psutil.AccessDenied:
        kids = []
    rss = threads = 0
    cpu = 0.0
    files = 0
    files_read = False
    for proc in (root, *kids):
        try:
            with proc.oneshot():
                rss += proc.memory_info().rss
                times = proc.cpu_times()
                cpu += times.user + times.system
                threads += proc.num_threads()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # a child that ended mid-walk, or one we may not read
        try:
            files += len(proc.open_files())
            files_read = True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return TreeStats(
        pid=pid,
        alive=True,
        rss_bytes=rss,
        cpu_seconds=cpu,
        threads=threads,
        open_files=files if files_read else None,
        children=len(kids),
    )


def host_values() -> dict[str, Any]:
    """Host memory and load average (blocking)."""
    mem = psutil.virtual_memory()
    load1, load5, load15 = os.getloadavg()
    return {
        "mem_available_bytes": mem.available,
        "mem_total_bytes": mem.total,
        "mem_percent": mem.percent,
        "load1": load1,
        "load5": load5,
        "load15": load15,
        "cpus": psutil.cpu_count() or 1,
    }


class ProcessCollector:
    """Samples the server's process tree and the host; never raises for a gone process."""

    name = COLLECTOR

    def __init__(
        self,
        pid_provider: Callable[[], int | None],
        *,
        clock: Callable[[], float] = time.monotonic,
        trend_window: float = 3600.0,
        serving: Callable[[], bool] = lambda: True,
    ) -> None:
        self._pid_provider = pid_provider
        self._serving = serving
        self._clock = clock
        self.trend = Trend(trend_window)
        """The server tree's RSS trend, while its main pid stays the same."""
        self._last: tuple[int, float, float] | None = None  # (pid, monotonic, cpu_seconds)

    async def collect(self) -> list[Sample]:
        """One ``server`` sample (when there is a pid) and one ``host`` sample."""
        at = time.time()
        samples: list[Sample] = []
        pid = self._pid_provider()
        if pid is None:
            self._last = None
            samples.append(Sample(COLLECTOR, "server", at, {"pid": None, "alive": False}))
        else:
            stats = await asyncio.to_thread(tree_stats, pid)
            samples.append(Sample(COLLECTOR, "server", at, self._server_values(stats)))
        host = await asyncio.to_thread(host_values)
        samples.append(Sample(COLLECTOR, "host", at, host))
        server = samples[0].values
        if not self._serving():
            self.trend = Trend(self.trend.window)  # starting or stopped: no creep to see
        elif isinstance(server.get("rss_bytes"), int):
            # the limit is what the tree has plus what the host still has free
            limit = server["rss_bytes"] + host["mem_available_bytes"]
            est = self.trend.add(at, server["rss_bytes"], limit, server["pid"])
            if est is not None:
                server["rss_growth_mb_per_h"] = round(est.growth_per_hour / (1 << 20), 1)
                server["rss_oom_eta_s"] = est.eta_s
        return samples

    def _server_values(self, stats: TreeStats) -> dict[str, Any]:
        if not stats.alive:
            self._last = None
            return {"pid": stats.pid, "alive": False}
        now = self._clock()
        cpu_percent: float | None = None
        if self._last is not None and self._last[0] == stats.pid and now > self._last[1]:
            used = max(stats.cpu_seconds - self._last[2], 0.0)
            cpu_percent = round(100.0 * used / (now - self._last[1]), 1)
        self._last = (stats.pid, now, stats.cpu_seconds)
        return {
            "pid": stats.pid,
            "alive": True,
            "rss_bytes": stats.rss_bytes,
            "cpu_percent": cpu_percent,
            "threads": stats.threads,
            "open_files": stats.open_files,
            "children": stats.children,
        }


SPEC = CollectorSpec(
    name=COLLECTOR,
    build=lambda ctx: ProcessCollector(
        ctx.server_pid, trend_window=ctx.config.process.trend_window, serving=ctx.serving
    ),
    enabled=lambda cfg: cfg.process.enabled,
    interval=lambda cfg: cfg.process.interval,
    needs_server=True,
)
"""The ``process`` collector as registered."""


__all__ = ["COLLECTOR", "SPEC", "ProcessCollector", "TreeStats", "host_values", "tree_stats"]
