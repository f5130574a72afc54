"""The TUI at 3 a.m. over SSH (issue 19): search boxes keep the keys typed into them, 80x24 is
usable, the newest incident is in view, and requests need a running doctor."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input

from ascend_doctor.core.store import Store
from ascend_doctor.tui.screens import LogsScreen, OverviewScreen, TracesScreen
from ascend_doctor.tui.widgets import LogPane, LogView
from tests.tui.conftest import make_app, shown, until


def requests(state: Path) -> list[tuple[str, int | None]]:
    store = Store.in_dir(state, readonly=True)
    try:
        return [(r.kind, r.incident_id) for r in store.requests()]
    finally:
        store.close()


async def test_keys_typed_into_a_search_never_reach_the_hotkeys(state: Path) -> None:
    app = make_app(state, alive=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, OverviewScreen)
        await pilot.press("l")
        logs = await shown(pilot, LogsScreen)
        box = logs.query_one(Input)
        for word in ("oom", "qaprt"):  # the second search too: q would quit, a/p/r request
            await pilot.press("slash")
            assert box.has_focus
            await pilot.press(*word)
            assert box.value == word and isinstance(app.screen, LogsScreen)
            await pilot.press("enter")
            assert logs.query_one(LogView).has_focus  # Enter gives the focus back
        assert requests(state) == []
        await pilot.press("slash", "x", "escape")
        assert not box.has_focus and logs.query_one(LogView).has_focus
        await pilot.press("escape")
        await shown(pilot, OverviewScreen)
        pane_box = app.screen.query_one(LogPane).query_one(Input)
        await pilot.press("slash", "q", "a")
        assert pane_box.value == "qa" and isinstance(app.screen, OverviewScreen)
        await pilot.press("enter", "t")
        traces = await shown(pilot, TracesScreen)
        await pilot.press("slash", "q", "r")
        assert traces.query_one(Input).value == "qr" and app.is_running
        assert requests(state) == []


async def test_requests_need_a_running_doctor_and_are_not_queued_twice(state: Path) -> None:
    app = make_app(state, alive=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, OverviewScreen)
        await pilot.press("a", "p")
        await until(pilot, lambda: len(app._notifications) >= 2, "two notices")
        said = [n.message for n in app._notifications]
        assert all("the doctor is not running: nothing was queued" in m for m in said), said
        assert requests(state) == []
    app = make_app(state, alive=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, OverviewScreen)
        await pilot.press("a")
        await until(pilot, lambda: requests(state) == [("ack", 3)], "the ack request")
        await pilot.press("a")  # pressed again before the doctor got to it
        await until(
            pilot,
            lambda: any("already waiting" in n.message for n in app._notifications),
            "the second press to be answered",
        )
        assert requests(state) == [("ack", 3)]
