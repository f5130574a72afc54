"""The header: doctor alive or not, the server's state and uptime, restarts, mode, overrides."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ascend_doctor.tui.data import HeaderView
from ascend_doctor.tui.render import Palette, uptime


class HeaderBar(Static):
    """Two lines at the top of the overview."""

    def show(self, view: HeaderView, now: float) -> None:
        """Render ``view`` as of ``now``."""
        pal = Palette.of(self.app)
        line = Text()
        line.append(" ascend-doctor ", style="bold reverse")
        line.append("  ")
        if not view.store_ok:
            line.append("no store yet", style=pal.state("failed"))
            line.append(f"  {view.problem}")
            self.update(line)
            return
        if view.doctor_alive:
            line.append(f"doctor running (pid {view.doctor_pid})", style=pal.state("RUNNING"))
        else:
            line.append("doctor NOT running: last known state", style=pal.state("failed"))
        line.append(f"  mode {view.mode}")
        if view.note:
            line.append(f"  {view.note}", style="bold")
        line.append("\n server ")
        line.append(view.server_state, style=pal.state(view.server_state))
        if view.server_state == "RUNNING" and view.server_since is not None:
            line.append(f" up {uptime(now - view.server_since)}")
        line.append(f"  restarts {view.restarts}")
        if view.overrides:
            line.append("  overrides ")
            line.append(" ".join(view.overrides), style=pal.state("mitigating"))
        self.update(line)


__all__ = ["HeaderBar"]
