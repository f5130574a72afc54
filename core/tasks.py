"""Small asyncio helpers the daemon's parts share."""

from __future__ import annotations

import asyncio
import contextlib
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


__all__ = ["until_stopped"]
