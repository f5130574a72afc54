"""The logs and the rules: the tailer's chunks scanned by the engine, findings handed on.

Every text the doctor reads goes this one way: the server's own output (teed to a file in the
state dir), the CANN plog and device logs under the server's log root, the configured globs,
and the text a failing collector printed (npu-smi's dcmi errors).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import time
from collections.abc import Callable

from ascend_doctor.collectors.kernel_sources import KernelStream
from ascend_doctor.collectors.log_sources import StoreCheckpoints
from ascend_doctor.collectors.logs import Source, Tailer, Waker
from ascend_doctor.core.config import LogsConfig
from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import Finding, LogChunk, ProcessEvent
from ascend_doctor.core.store import Store
from ascend_doctor.rules import Engine
from ascend_doctor.rules.infer import as_unrecognised

log = logging.getLogger(__name__)

KERNEL_LAG = 2.0
"""Seconds a killed server's exit waits for the journal to hand on the kernel's line."""
TAILER_STARTED = "tailer.first_started_at"
"""Store meta: when the tailer first ran on this store (its one owner is this module)."""


class LogWatch:
    """Reads every source to its end when woken (inotify) or every poll interval."""

    def __init__(
        self,
        config: LogsConfig,
        store: Store,
        sources: list[Source],
        engine: Engine,
        on_findings: Callable[[list[Finding]], None],
        on_drained: Callable[[], None] = lambda: None,
        kernel: KernelStream | None = None,
        keep: Callable[[Finding], bool] = lambda f: True,
    ) -> None:
        self.config = config
        self.store = store
        self.engine = engine
        self._on_findings = on_findings
        self._on_drained = on_drained
        self.kernel = kernel
        self._keep = keep  # drops kernel lines about processes that are not the server's
        self.tailer = Tailer(
            sources,
            StoreCheckpoints(store),
            read_from=config.read_from,
            lookback_bytes=config.lookback_bytes,
            # read_from=end is for the doctor's very first start only; after that, a file
            # nobody has seen was written while the doctor was away and is read whole
            first_start=store.meta(TAILER_STARTED) is None,
            max_line_bytes=config.max_line_bytes,
            roots=config.follow_roots,
        )
        self._wake = asyncio.Event()
        self._waker: Waker | None = None

    def start(self) -> None:
        """Take start positions and read what a restarted doctor missed while it was away
        (never dropping what this first pass reads); then let inotify wake the loop."""
        loop = asyncio.get_running_loop()

        def wake() -> None:
            if not loop.is_closed():  # inotify may fire while the doctor shuts down
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._wake.set)

        self._waker = Waker(wake)
        if self.config.inotify:
            self._waker.start(self.tailer.watch_dirs())
        if self.kernel is not None and not self.kernel.open():
            self.kernel = None
        self.drain()
        if self.store.meta(TAILER_STARTED) is None:
            self.store.set_meta(TAILER_STARTED, time.time())

    def drain(self, once: bool = False, names: bool = True) -> None:
        """Read every source to its end now and hand on what the rules find. ``once``: one
        pass unless a file had more than one read's worth (inotify wakes the loop for
        anything written meanwhile); ``names=False``: no glob (see ``Tailer.poll``)."""
        while True:
            chunks = self.tailer.poll(names) + (self.kernel.poll() if self.kernel else [])
            names = False
            if not chunks:
                break
            findings: list[Finding] = []
            for chunk in chunks:
                findings.extend(f for f in self.engine.scan(chunk) if self._keep(f))
            if findings:
                self._hand_on(findings)
            self.tailer.commit()
            if self.kernel is not None:
                self.kernel.commit()
            if once and not self.tailer.more:
                break
        self._on_drained()

    async def kernel_caught_up(self, event: ProcessEvent, explained: Callable[[], bool]) -> None:
        """SIGKILL is how the OOM killer ends a process, and the journal hands on the kernel's
        line a moment after the kernel printed it (journald reads it, journalctl follows): a
        server killed so waits up to KERNEL_LAG seconds, reading, until ``explained()``."""
        killed = event.exit_code in (None, -signal.SIGKILL, 128 + signal.SIGKILL)
        if not (event.crashed and killed and self.kernel is not None and self.kernel.lags):
            return
        deadline = time.monotonic() + KERNEL_LAG
        while time.monotonic() < deadline and not explained():
            with contextlib.suppress(StoreError):  # counted by the store; the wait goes on
                self.drain()
            await asyncio.sleep(0.05)

    def scan_text(self, name: str, text: str, file_id: str) -> None:
        """Text that is not in a file (a failing collector's output) through the same rules."""
        chunk = LogChunk(name, "host", 0, (text + "\n").encode(), file_id=file_id)
        findings = self.engine.scan(chunk)
        if findings:
            self._hand_on(findings)

    def _hand_on(self, findings: list[Finding]) -> None:
        """Findings to the doctor; a category inferred from an error's words (rules/infer.py)
        is handed on as what it is, an unrecognised error (its summary names the likely
        family): it explains no exit, opens no remediated incident, pages as no family."""
        self._on_findings([as_unrecognised(f) for f in findings])

    def paths(self) -> list[str]:
        """Every file followed now."""
        return list(self.tailer.paths())

    async def run(self) -> None:
        """Drain whenever woken or every poll interval, until cancelled.

        With inotify, a wake-up is one pass over the files followed, and new names are
        looked for (the globs) only when inotify saw a file appear, move or go, or at the
        poll interval; the wake is cleared before the pass, so a write during it wakes the
        loop again. Without inotify every pass globs and reads until nothing is left."""
        globbed = -math.inf
        while True:
            waker = self._waker
            inotify = waker is not None and waker.watching
            names = waker.taken() if waker is not None and inotify else True
            now = time.monotonic()
            if names or now - globbed >= self.config.poll_interval:
                names, globbed = True, now
            self._wake.clear()
            try:
                self.drain(once=inotify, names=names)
            except StoreError:
                pass  # the store counts and logs it (once a minute); reading goes on
            except Exception:  # a failing part is logged and isolated; the daemon goes on
                log.exception("tailing failed")
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancellation
            # that stops this loop, and then the daemon never finishes shutting down.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.poll_interval):
                    await self._wake.wait()

    async def close(self) -> None:
        """Stop the watcher, read the last words, release the files."""
        if self._waker is not None:
            await asyncio.to_thread(self._waker.stop)
        with contextlib.suppress(StoreError):  # a full disk must not fail the shutdown
            self.drain()
        self.tailer.close()
        if self.kernel is not None:
            self.kernel.close()


__all__ = ["KERNEL_LAG", "TAILER_STARTED", "LogWatch", "StoreCheckpoints"]
