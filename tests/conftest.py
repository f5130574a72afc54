"""Shared test helpers."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.store import Store

T = TypeVar("T")

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


def poll(cond: Callable[[], T | None], timeout: float, what: str) -> T:
    """Call ``cond`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def read_store(state: Path, fn: Callable[[Store], T]) -> T | None:
    """``fn`` over a read-only store of ``state``; None while it is not created yet."""
    try:
        store = Store.in_dir(state, readonly=True)
    except StoreError:  # not created yet, or being created right now
        return None
    try:
        return fn(store)
    finally:
        store.close()


def alive(pid: int) -> bool:
    """Whether a process with this PID exists (a zombie still counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
