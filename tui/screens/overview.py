"""The overview: header, devices, server, incidents and the live log."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.events import Resize
from textual.widgets import Footer, Static

from ascend_doctor.tui.data import Overview, load_overview
from ascend_doctor.tui.messages import OpenIncident
from ascend_doctor.tui.screens.base import RefreshingScreen, search_key, slash_typed
from ascend_doctor.tui.widgets import DevicesTable, HeaderBar, IncidentsTable, LogPane, ServerPanel

COMPACT_BELOW = 110  # columns under which the devices table drops its trend columns


class OverviewScreen(RefreshingScreen[Overview]):
    """What is wrong, what the doctor did, and what the log says, on one screen."""

    BINDINGS: ClassVar[list[BindingType]] = [
        search_key("filter", "filter"),
        Binding("escape", "clear_filter", "clear filter", show=False),
        Binding("t", "app.traces", "traces"),
        Binding("l", "app.logs", "logs"),
        Binding("f", "app.profiles", "profiles"),
    ]

    def compose(self) -> ComposeResult:
        """Header, devices and server side by side, incidents, log, footer."""
        yield HeaderBar(id="header")
        with Horizontal(id="top"):
            yield DevicesTable(id="devices")
            yield ServerPanel(id="server")
        yield Static("incidents (open first; enter opens)", id="incidents-title", classes="title")
        yield IncidentsTable(id="incidents")
        yield LogPane(id="log")
        yield Footer()

    def load(self) -> Overview:
        """Store and log tail (worker thread)."""
        return load_overview(self.doctor.source, self.doctor.alive)

    def show(self, data: Overview) -> None:
        """Update every widget in place."""
        now = self.doctor.clock()
        self.query_one(HeaderBar).show(data.header, now)
        self.query_one(DevicesTable).show(data.devices)
        self.query_one(ServerPanel).show(data.server, now, data.header.server_state)
        self.query_one(IncidentsTable).show(data.incidents, now)
        title = self.doctor.source.display(data.log_path) if data.log_path else ""
        self.query_one(LogPane).show(data.log_path, title, data.log_lines)

    def on_mount(self) -> None:
        """The incidents list has the focus; first load."""
        self.query_one(IncidentsTable).focus()
        self._fit(self.app.size.width)
        super().on_mount()

    def on_resize(self, event: Resize) -> None:
        """A narrow terminal keeps the essentials."""
        self._fit(event.size.width)

    def _fit(self, width: int) -> None:
        self.query_one(DevicesTable).set_compact(width < COMPACT_BELOW)

    def current_incident(self) -> int | None:
        """The incident under the cursor (for acknowledge and next step)."""
        return self.query_one(IncidentsTable).selected_id()

    def action_filter(self) -> None:
        """``/``: filter the log."""
        if slash_typed(self):
            return
        self.query_one(LogPane).open_filter()

    def action_clear_filter(self) -> None:
        """``esc``: clear the log filter."""
        self.query_one(LogPane).clear_filter()
        self.set_focus(self.query_one(IncidentsTable))

    def on_open_incident(self, message: OpenIncident) -> None:
        """Open the incident screen."""
        self.doctor.open_incident(message.incident_id)


__all__ = ["OverviewScreen"]
