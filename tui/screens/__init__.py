"""The TUI's screens."""

from ascend_doctor.tui.screens.dialogs import ConfirmScreen, HelpScreen
from ascend_doctor.tui.screens.incident import IncidentScreen
from ascend_doctor.tui.screens.logs import LogsScreen
from ascend_doctor.tui.screens.overview import OverviewScreen
from ascend_doctor.tui.screens.profiles import ProfilesScreen
from ascend_doctor.tui.screens.traces import TraceScreen, TracesScreen

__all__ = [
    "ConfirmScreen",
    "HelpScreen",
    "IncidentScreen",
    "LogsScreen",
    "OverviewScreen",
    "ProfilesScreen",
    "TraceScreen",
    "TracesScreen",
]
