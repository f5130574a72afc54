"""Fixtures for the TUI tests: a fixture state dir and an app on it with a fixed clock."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.screen import Screen

from ascend_doctor.core.store import Store
from ascend_doctor.tui.app import DoctorApp
from ascend_doctor.tui.data import Source
from ascend_doctor.tui.screens.base import RefreshingScreen
from tests.tui.store_fixture import NOW, build_state


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return build_state(tmp_path / "state")


def requests(state: Path) -> list[tuple[str, int | None]]:
    """The operator requests the TUI queued in the store: (kind, incident)."""
    store = Store.in_dir(state, readonly=True)
    try:
        return [(r.kind, r.incident_id) for r in store.requests()]
    finally:
        store.close()


def make_app(state: Path, *, alive: bool = False, interval: float = 0.2) -> DoctorApp:
    """The app on ``state`` at the fixture's fixed time."""
    return DoctorApp(
        Source.for_state_dir(state),
        clock=lambda: NOW,
        alive=lambda pid: alive,
        interval=interval,
    )


async def shown(
    pilot: Pilot[None], kind: type[Screen[None]], *, loads: int = 1, timeout: float = 10.0
) -> Screen[None]:
    """Wait until a screen of ``kind`` is on top and has shown ``loads`` loads."""
    deadline = time.monotonic() + timeout
    while True:
        screen = pilot.app.screen
        if isinstance(screen, kind) and (
            not isinstance(screen, RefreshingScreen) or screen.loads >= loads
        ):
            await pilot.pause()
            return screen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {kind.__name__} (on {screen!r})")
        await pilot.pause(0.02)


async def until(pilot: Pilot[None], cond: object, what: object, timeout: float = 10.0) -> None:
    """Poll ``cond()`` between frames until it is true (``what`` may be a callable saying
    what was seen)."""
    deadline = time.monotonic() + timeout
    assert callable(cond)
    while not cond():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out waiting for {said}")
        await pilot.pause(0.02)
