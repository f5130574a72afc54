"""How each screen looks, as SVG snapshots (pytest-textual-snapshot), on the fixture store
at a fixed time and a fixed terminal size. Regenerate with ``--snapshot-update`` and review
the diff like code."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import RichLog

from ascend_doctor.tui.screens import IncidentScreen, LogsScreen, OverviewScreen, TracesScreen
from ascend_doctor.tui.screens.traces import TraceScreen
from ascend_doctor.tui.widgets import LogView
from tests.tui.conftest import make_app, shown, until
from tests.tui.store_fixture import LOG_LINES

SnapCompare = Callable[..., bool]


def _settled(then: Callable[[Pilot[None]], Awaitable[None]] | None = None) -> Any:
    async def run_before(pilot: Pilot[None]) -> None:
        await shown(pilot, OverviewScreen)
        log = pilot.app.screen.query_one(RichLog)
        # the live log follows its end once laid out: wait for that, or the scrollbar moves
        await until(
            pilot,
            lambda: log.lines and log.scroll_y == log.max_scroll_y,
            lambda: f"log at end: {len(log.lines)} {log.scroll_y} {log.max_scroll_y} {log.size}",
        )
        if then is not None:
            await then(pilot)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    return run_before


def test_overview(state: Path, snap_compare: SnapCompare) -> None:
    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(120, 36), run_before=_settled()
    )


def test_overview_80x24(state: Path, snap_compare: SnapCompare) -> None:
    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(80, 24), run_before=_settled()
    )


def test_incident(state: Path, snap_compare: SnapCompare) -> None:
    async def open_it(pilot: Pilot[None]) -> None:
        await pilot.press("down", "down", "enter")
        await shown(pilot, IncidentScreen)

    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(120, 40), run_before=_settled(open_it)
    )


def test_incident_evidence(state: Path, snap_compare: SnapCompare) -> None:
    async def open_it(pilot: Pilot[None]) -> None:
        await pilot.press("down", "down", "enter")
        await shown(pilot, IncidentScreen)
        await pilot.press("e")

    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(120, 40), run_before=_settled(open_it)
    )


def test_traces(state: Path, snap_compare: SnapCompare) -> None:
    async def open_it(pilot: Pilot[None]) -> None:
        await pilot.press("t")
        await shown(pilot, TracesScreen)

    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(120, 30), run_before=_settled(open_it)
    )


def test_trace_waterfall(state: Path, snap_compare: SnapCompare) -> None:
    async def open_it(pilot: Pilot[None]) -> None:
        await pilot.press("t")
        await shown(pilot, TracesScreen)
        await pilot.press("enter")
        await shown(pilot, TraceScreen)

    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(120, 30), run_before=_settled(open_it)
    )


def test_logs(state: Path, snap_compare: SnapCompare) -> None:
    async def open_it(pilot: Pilot[None]) -> None:
        await pilot.press("l")
        screen = await shown(pilot, LogsScreen)
        view = screen.query_one(LogView)
        await until(pilot, lambda: view.virtual_size.height == len(LOG_LINES), "log lines")
        await pilot.press("slash", *"warning", "enter")
        await until(pilot, lambda: view.match_line == 5, "the match")

    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(120, 30), run_before=_settled(open_it)
    )


def test_help(state: Path, snap_compare: SnapCompare) -> None:
    async def open_it(pilot: Pilot[None]) -> None:
        await pilot.press("question_mark")

    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(100, 30), run_before=_settled(open_it)
    )


def test_confirm_dialog_light_theme(state: Path, snap_compare: SnapCompare) -> None:
    async def open_it(pilot: Pilot[None]) -> None:
        pilot.app.theme = "textual-light"
        await pilot.press("r")

    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(100, 30), run_before=_settled(open_it)
    )


def _incident_two(pilot: Pilot[None]) -> Awaitable[None]:
    async def go() -> None:
        pilot.app.open_incident(2)  # type: ignore[attr-defined]
        await shown(pilot, IncidentScreen)

    return go()


def _logs(pilot: Pilot[None]) -> Awaitable[None]:
    async def go() -> None:
        await pilot.press("l")
        screen = await shown(pilot, LogsScreen)
        view = screen.query_one(LogView)
        await until(pilot, lambda: view.virtual_size.height == len(LOG_LINES), "log lines")

    return go()


def test_incident_80x24(state: Path, snap_compare: SnapCompare) -> None:
    """Over SSH at 80x24: the summary, the decisions and the whole waterfall."""
    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(80, 24), run_before=_settled(_incident_two)
    )


def test_logs_80x24(state: Path, snap_compare: SnapCompare) -> None:
    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(80, 24), run_before=_settled(_logs)
    )


def test_overview_160x48(state: Path, snap_compare: SnapCompare) -> None:
    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(160, 48), run_before=_settled()
    )


def test_incident_160x48(state: Path, snap_compare: SnapCompare) -> None:
    assert snap_compare(
        make_app(state, interval=3600), terminal_size=(160, 48), run_before=_settled(_incident_two)
    )
