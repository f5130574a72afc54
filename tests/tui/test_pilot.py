"""The TUI's behaviour, driven with Pilot on a store built from fixtures."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from textual.widgets import Input, RichLog

from ascend_doctor.core.store import Store
from ascend_doctor.tui.app import DoctorApp
from ascend_doctor.tui.data import Source
from ascend_doctor.tui.screens import (
    ConfirmScreen,
    HelpScreen,
    IncidentScreen,
    LogsScreen,
    OverviewScreen,
    TraceScreen,
    TracesScreen,
)
from ascend_doctor.tui.widgets import (
    DecisionsTable,
    HeaderBar,
    IncidentsTable,
    LogPane,
    LogView,
    SpanDetail,
    TracesTable,
    Waterfall,
)
from tests.tui.conftest import make_app, requests, shown, until
from tests.tui.store_fixture import LOG_LINES, NOW, build_state


async def test_navigate_overview_incident_traces_logs_and_back(state: Path) -> None:
    app = make_app(state)
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, OverviewScreen)
        table = app.screen.query_one(IncidentsTable)
        assert table.row_count == 3
        assert table.selected_id() == 3  # the open incident comes first
        await pilot.press("down", "enter")
        inc = await shown(pilot, IncidentScreen)
        assert isinstance(inc, IncidentScreen) and inc.incident_id == 2
        decisions = inc.query_one(DecisionsTable)
        assert decisions.row_count == 2
        assert inc.query_one(Waterfall).row_count == 4
        await pilot.press("escape")
        await shown(pilot, OverviewScreen)
        await pilot.press("t")
        traces = await shown(pilot, TracesScreen)
        assert traces.query_one(TracesTable).row_count == 4
        await pilot.press("enter")
        trace = await shown(pilot, TraceScreen)
        assert trace.query_one(Waterfall).row_count == 2
        await pilot.press("escape", "escape")
        await shown(pilot, OverviewScreen)
        await pilot.press("l")
        logs = await shown(pilot, LogsScreen)
        view = logs.query_one(LogView)
        await until(pilot, lambda: view.virtual_size.height == len(LOG_LINES), "log lines")
        await pilot.press("escape")
        await shown(pilot, OverviewScreen)
        await pilot.press("question_mark")
        await shown(pilot, HelpScreen)
        await pilot.press("escape")
        await shown(pilot, OverviewScreen)
        await pilot.press("escape")  # never past the overview
        assert isinstance(app.screen, OverviewScreen)


async def test_waterfall_cursor_shows_the_span_beside_it(state: Path) -> None:
    app = make_app(state)
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, OverviewScreen)
        app.open_incident(1)
        inc = await shown(pilot, IncidentScreen)
        fall = inc.query_one(Waterfall)
        fall.focus()
        await pilot.press("down")
        chosen = fall.chosen()
        assert chosen is not None and chosen.name == "detect"
        detail = inc.query_one(SpanDetail)
        await until(
            pilot,
            lambda: "rule = torch-npu-oom" in str(detail.query_one("#span-text").render()),
            "detail",
        )
        before = fall.region
        await pilot.press("down")
        assert fall.region == before  # the side panel never moves the rows


async def test_log_filter_shows_only_matching_lines(state: Path) -> None:
    app = make_app(state)
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, OverviewScreen)
        log = app.screen.query_one(LogPane).query_one(RichLog)
        await until(pilot, lambda: len(log.lines) == len(LOG_LINES), "the log tail")
        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*"ERROR")
        await until(pilot, lambda: len(log.lines) == 2, "filtered lines")
        await pilot.press("escape")
        await until(pilot, lambda: len(log.lines) == len(LOG_LINES), "unfiltered lines")


async def test_traces_filter(state: Path) -> None:
    app = make_app(state)
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, OverviewScreen)
        await pilot.press("t")
        traces = await shown(pilot, TracesScreen)
        table = traces.query_one(TracesTable)
        await pilot.press("slash", *"incident")
        await until(pilot, lambda: table.row_count == 2, "incident traces only")
        await pilot.press("enter", "escape")
        await until(pilot, lambda: table.row_count == 4, "all traces")


async def test_log_search_jumps_to_the_match(state: Path) -> None:
    app = make_app(state)
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, OverviewScreen)
        await pilot.press("l")
        logs = await shown(pilot, LogsScreen)
        view = logs.query_one(LogView)
        await until(pilot, lambda: view.virtual_size.height == len(LOG_LINES), "log lines")
        await pilot.press("slash", *"warning", "enter")
        await until(pilot, lambda: view.match_line == 5, "the match")
        assert not view.follow


async def test_acknowledge_adds_a_request_row(state: Path) -> None:
    app = make_app(state, alive=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, OverviewScreen)
        await pilot.press("a")
        await until(pilot, lambda: requests(state) == [("ack", 3)], "the ack request")
        app.open_incident(1)
        await shown(pilot, IncidentScreen)
        await pilot.press("a", "p")
        await until(
            pilot,
            lambda: requests(state) == [("ack", 3), ("ack", 1), ("profile", 1)],
            "ack and profile requests",
        )


async def test_next_step_asks_first_and_no_adds_nothing(state: Path) -> None:
    app = make_app(state, alive=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await shown(pilot, OverviewScreen)
        await pilot.press("r")
        await shown(pilot, ConfirmScreen)
        await pilot.press("n")
        await shown(pilot, OverviewScreen)
        assert requests(state) == []
        await pilot.press("r")
        await shown(pilot, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: requests(state) == [("next_step", 3)], "the next_step request")


async def test_header_says_whether_the_doctor_runs(state: Path) -> None:
    for alive, said in ((False, "doctor NOT running"), (True, "doctor running (pid 424242)")):
        app = make_app(state, alive=alive)
        async with app.run_test(size=(120, 40)) as pilot:
            await shown(pilot, OverviewScreen)
            assert said in str(app.screen.query_one(HeaderBar).render())


async def test_no_store_yet_is_said_and_picked_up_when_it_appears(tmp_path: Path) -> None:
    state = tmp_path / "state"
    app = make_app(state, interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await shown(pilot, OverviewScreen)
        header = screen.query_one(HeaderBar)
        assert "no store yet" in str(header.render())
        build_state(state)
        await until(pilot, lambda: "mode auto" in str(header.render()), "the store")
        await until(pilot, lambda: screen.query_one(IncidentsTable).row_count == 3, "incidents")


async def test_live_refresh_shows_new_incidents_and_log_lines(state: Path) -> None:
    app = make_app(state, interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await shown(pilot, OverviewScreen)
        log = screen.query_one(LogPane).query_one(RichLog)
        await until(pilot, lambda: len(log.lines) == len(LOG_LINES), "the log tail")
        with open(state / "server.log", "a") as fh:
            fh.write("(APIServer pid=728) INFO: a new line\n")
        await until(pilot, lambda: len(log.lines) == len(LOG_LINES) + 1, "the new line")
        store = Store.in_dir(state)
        store.update_incident(3, state="resolved", resolved_at=NOW)
        store.close()
        table = screen.query_one(IncidentsTable)
        await until(pilot, lambda: "resolved" in str(table.get_row("3")[1]), "the change")


async def test_command_palette_lists_the_actions(state: Path) -> None:
    app = make_app(state)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await shown(pilot, OverviewScreen)
        titles = [c.title for c in app.get_system_commands(screen)]
        for want in ("Acknowledge incident", "Capture profile", "Run next remediation step"):
            assert want in titles


async def test_read_only_store_copy_post_mortem(state: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy" / "doctor.db"
    copy.parent.mkdir()
    with sqlite3.connect(state / "doctor.db") as db:
        db.execute("VACUUM INTO ?", (str(copy),))
    app = DoctorApp(Source(copy), clock=lambda: NOW, alive=lambda pid: False)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await shown(pilot, OverviewScreen)
        assert screen.query_one(IncidentsTable).row_count == 3
        assert "doctor NOT running" in str(screen.query_one(HeaderBar).render())


async def test_a_device_cell_that_grows_widens_its_column() -> None:
    from textual.app import App, ComposeResult

    from ascend_doctor.tui.data import DeviceView
    from ascend_doctor.tui.widgets import DevicesTable

    def device(power: float) -> DeviceView:
        return DeviceView("npu0", "OK", 3000.0, 65536.0, 0.0, 36.0, power, (), (), NOW)

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield DevicesTable()

    app = One()
    async with app.run_test(size=(120, 20)) as pilot:
        table = app.query_one(DevicesTable)
        table.show((device(88.0),))
        await pilot.pause()
        table.show((device(189.0),))  # a loaded card draws more: 3 digits, not "18"
        await pilot.pause()
        assert table.columns["W"].content_width >= len("189")  # type: ignore[index]


async def test_profiles_show_the_stored_analysis_with_its_bars(state: Path) -> None:
    from ascend_doctor.collectors.profiling import analyze, render_text
    from ascend_doctor.core.records import Artifact, ProfileSummary
    from ascend_doctor.tui.screens import ProfilesScreen

    capture = Path(__file__).parents[1] / "fixtures" / "profile" / "msprof-analyze-cluster-8rank"
    report = analyze(capture, advisor=False)
    summary = ProfileSummary(report.headline, render_text(report), 1, "not run")
    store = Store.in_dir(state)
    try:
        store.add_artifact(Artifact("torch_profile", str(capture), 1, NOW - 60, NOW - 30))
        store.add_artifact(Artifact("torch_profile", str(capture), 1, NOW - 20, NOW - 10, summary))
    finally:
        store.close()
    app = make_app(state)
    async with app.run_test(size=(140, 50)) as pilot:
        await shown(pilot, OverviewScreen)
        await pilot.press("f")
        screen = await shown(pilot, ProfilesScreen)
        await until(pilot, lambda: screen.loads > 0, "profiles loaded")
        text = str(screen.query_one("#profiles-report").render())
        assert "rank 1 is the slow rank" in text and "<- slow" in text and "█" in text
        assert text.index("rank 1 is the slow rank") < text.index("not analysed")
        await pilot.press("escape")
        await shown(pilot, OverviewScreen)


async def test_several_servers_are_shown_one_at_a_time_and_s_shows_the_next(
    tmp_path: Path,
) -> None:
    a = build_state(tmp_path / "state" / "servers" / "a")
    b = tmp_path / "state" / "servers" / "b"
    Store.in_dir(b).close()  # b: a store without incidents
    app = DoctorApp(
        Source(a / "doctor.db", a, [("a", a), ("b", b)]),
        clock=lambda: NOW,
        alive=lambda pid: False,
        interval=0.05,
    )
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await shown(pilot, OverviewScreen)
        assert app.sub_title.startswith("server a")
        await until(pilot, lambda: screen.query_one(IncidentsTable).row_count == 3, "a's")
        await pilot.press("s")
        assert app.sub_title.startswith("server b")
        await until(pilot, lambda: screen.query_one(IncidentsTable).row_count == 0, "b's")
        await pilot.press("s")
        assert app.source.server == "a"
