"""The TUI at 3 a.m. over SSH (issue 19): search boxes keep the keys typed into them, 80x24 is
usable, the newest incident is in view, and requests need a running doctor."""

from __future__ import annotations

from pathlib import Path

from textual import events
from textual.widgets import Input

from ascend_doctor.core.events import (
    Category,
    Finding,
    IncidentState,
    ProcessState,
    Role,
    Severity,
)
from ascend_doctor.core.records import ServerStatus
from ascend_doctor.core.store import Store
from ascend_doctor.tui.data import DEMO_DONE
from ascend_doctor.tui.screens import IncidentScreen, LogsScreen, OverviewScreen, TracesScreen
from ascend_doctor.tui.widgets import (
    DecisionsTable,
    HeaderBar,
    IncidentsTable,
    LogPane,
    LogView,
    ServerPanel,
    SpanDetail,
    Waterfall,
)
from tests.tui.conftest import make_app, requests, shown, until
from tests.tui.store_fixture import NOW, build_state


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


def _add_escalated(state: Path, n: int) -> list[int]:
    store = Store.in_dir(state)
    try:
        ids = []
        for k in range(n):
            f = Finding(
                "rt-set-device-failed",
                Category.DEVICE_UNAVAILABLE,
                Severity.CRITICAL,
                Role.ROOT,
                f"npu{k}",
                f"fault {k}",
                at=NOW - 60 + k,
            )
            inc = store.open_incident(f)
            store.update_incident(inc.id, state=IncidentState.ESCALATED, resolved_at=NOW - 50 + k)
            ids.append(inc.id)
        return ids
    finally:
        store.close()


async def test_the_newest_incident_stays_in_view_at_80x24(state: Path) -> None:
    app = make_app(state, interval=0.1)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, OverviewScreen)
        table = app.screen.query_one(IncidentsTable)
        assert table.selected_id() == 3
        ids = _add_escalated(state, 8)  # a tour's worth of escalations arrive
        await until(pilot, lambda: table.row_count == 11, "the new incidents")
        await pilot.pause()
        # the open one first, then those waiting for a human, newest first: all in view
        assert table.get_row_at(0)[0] == "3" and table.get_row_at(1)[0] == str(ids[-1])
        assert table.scroll_y == 0 and table.cursor_row == 0


async def test_a_stopped_server_is_stopped_not_failing_its_health_check(state: Path) -> None:
    store = Store.in_dir(state)
    store.set_server(ServerStatus(ProcessState.STOPPED, None, NOW - 5, "staying stopped"))
    store.close()
    app = make_app(state)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, OverviewScreen)
        panel = str(app.screen.query_one(ServerPanel).render())
        assert "server STOPPED" in panel and "health" not in panel


async def test_the_header_says_the_demo_tour_has_finished(state: Path) -> None:
    (state / DEMO_DONE).write_text("demo tour finished: 8 of 8 scenarios as expected\n")
    app = make_app(state)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, OverviewScreen)
        header = str(app.screen.query_one(HeaderBar).render())
        assert "doctor NOT running" in header
        assert "demo tour finished: 8 of 8 scenarios as expected" in header


async def test_80x24_logs_narrow_their_list_and_scroll_sideways(tmp_path: Path) -> None:
    long = "(APIServer pid=728) WARNING 12-02 11:20:00 [scheduler.py:88] " + "x" * 150 + " END"
    state = build_state(tmp_path / "state", log_lines=[long] * 8)
    app = make_app(state)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, OverviewScreen)
        await pilot.press("l")
        logs = await shown(pilot, LogsScreen)
        view = logs.query_one(LogView)
        await until(pilot, lambda: view.virtual_size.height == 8, "log lines")
        assert logs.query_one("#log-sources").size.width <= 18
        assert view.size.width >= 58
        await pilot.press(*["right"] * 40)
        assert view.scroll_x > 0


async def test_80x24_incident_shows_summary_decisions_and_the_whole_waterfall(
    state: Path,
) -> None:
    app = make_app(state)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, OverviewScreen)
        app.open_incident(2)
        inc = await shown(pilot, IncidentScreen)
        await pilot.pause()
        assert "The task scheduler" in str(inc.query_one("#inc-summary").render())
        decisions = inc.query_one(DecisionsTable)
        assert decisions.row_count == 2 and decisions.size.height >= 3
        waterfall = inc.query_one(Waterfall)
        assert waterfall.row_count == 4
        assert waterfall.size.height >= waterfall.row_count + 1  # the header and every span
        detail = str(inc.query_one(SpanDetail).render())
        assert "unset" not in detail


async def test_a_burst_of_keys_after_slash_all_land_in_the_search(state: Path) -> None:
    """Over SSH "/qapr" arrives in one read: every key is in the queue before "/" is acted on."""
    app = make_app(state, alive=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, OverviewScreen)
        await pilot.press("l")
        logs = await shown(pilot, LogsScreen)
        for key, char in (("slash", "/"), ("q", "q"), ("a", "a"), ("p", "p"), ("r", "r")):
            app.post_message(events.Key(key, char))
        box = logs.query_one(Input)
        await until(pilot, lambda: box.value == "qapr", lambda: f"the box holds {box.value!r}")
        assert app.is_running and isinstance(app.screen, LogsScreen)
        await pilot.press("slash", "x")  # inside the box "/" is a character
        assert box.value == "qapr/x"
        assert requests(state) == []
