"""Shared test helpers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


async def wait_for(
    cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``cond`` until true, failing after ``timeout`` seconds (never a bare sleep)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
