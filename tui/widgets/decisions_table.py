"""Every remediation decision of an incident, with its outcome and reason."""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from ascend_doctor.core.events import ActionResult
from ascend_doctor.tui.render import Palette, clock_time

OUTCOME_STATE = {
    "ok": "resolved",
    "failed": "failed",
    "refused": "open",
    "dry_run": "mitigating",
    "suggested": "mitigating",
    "unknown": "mitigating",
}


class DecisionsTable(DataTable[Any]):
    """One row per decision, in order."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(cursor_type="row", **kw)
        self._shown: tuple[ActionResult, ...] = ()

    def on_mount(self) -> None:
        """Columns."""
        for name in ("at", "decision", "outcome", "reason", "params"):
            self.add_column(name, key=name)

    def show(self, actions: tuple[ActionResult, ...]) -> None:
        """Show the decisions (redrawn only when they changed)."""
        if actions == self._shown:
            return
        self._shown = actions
        pal = Palette.of(self.app)
        self.clear()
        for i, a in enumerate(actions):
            params = {k: v for k, v in a.params.items() if k not in ("argv",)}
            self.add_row(
                clock_time(a.at),
                a.name,
                Text(a.outcome.value, style=pal.state(OUTCOME_STATE.get(a.outcome.value, ""))),
                a.reason,
                json.dumps(params, sort_keys=True) if params else "",
                key=str(i),
            )


__all__ = ["DecisionsTable"]
