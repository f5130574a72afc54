"""The TUI's widgets, one per file."""

from ascend_doctor.tui.widgets.decisions_table import DecisionsTable
from ascend_doctor.tui.widgets.devices_table import DevicesTable
from ascend_doctor.tui.widgets.header_bar import HeaderBar
from ascend_doctor.tui.widgets.incidents_table import IncidentsTable
from ascend_doctor.tui.widgets.log_pane import LogPane
from ascend_doctor.tui.widgets.log_view import LogView
from ascend_doctor.tui.widgets.server_panel import ServerPanel
from ascend_doctor.tui.widgets.span_detail import SpanDetail
from ascend_doctor.tui.widgets.traces_table import TracesTable
from ascend_doctor.tui.widgets.waterfall import Waterfall

__all__ = [
    "DecisionsTable",
    "DevicesTable",
    "HeaderBar",
    "IncidentsTable",
    "LogPane",
    "LogView",
    "ServerPanel",
    "SpanDetail",
    "TracesTable",
    "Waterfall",
]
