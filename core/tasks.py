"""Small asyncio helpers the daemon's parts share."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any


async def until_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run ``work`` unless ``stop`` is set first (then it is cancelled): False when stopped."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    task.result()
    return True


log = logging.getLogger(__name__)


class Lifeline:
    """The loops the doctor cannot watch without (tailing, deciding, verifying, requests):
    each loop isolates its own failures, so one that ends anyway (an error outside its guard,
    a return) means the doctor has stopped watching. It then stops at once and exits non-zero,
    so systemd restarts a whole doctor, rather than linger without eyes."""

    def __init__(
        self, stop: asyncio.Event, tasks: list[asyncio.Task[Any]], vital: tuple[str, ...]
    ) -> None:
        self._stop = stop
        self.ended: str = ""
        """The first vital loop that ended on its own ("" while none has)."""
        for task in tasks:
            if task.get_name() in vital:
                task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or self._stop.is_set():
            return  # stopping: every loop is cancelled
        exc = task.exception()
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "it returned"
        log.critical(
            "the doctor's %s loop ended (%s): stopping, to be restarted whole",
            task.get_name(),
            why,
            exc_info=exc,
        )
        self.ended = self.ended or task.get_name()
        self._stop.set()


__all__ = ["Lifeline", "until_stopped"]
