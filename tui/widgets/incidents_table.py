"""A list of incidents (open first); ``enter`` opens one."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from ascend_doctor.tui.data import IncidentRow, severity_label
from ascend_doctor.tui.messages import OpenIncident
from ascend_doctor.tui.render import Palette, ago

COLUMNS = ("#", "state", "sev", "category", "subject", "age", "summary")


class IncidentsTable(DataTable[Any]):
    """Incidents keyed by id; rows are replaced only when the set or order changes."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(cursor_type="row", **kw)
        self._shown: tuple[IncidentRow, ...] = ()
        self._now_bucket = -1

    def on_mount(self) -> None:
        """Columns with stable keys."""
        for name in COLUMNS:
            self.add_column(name, key=name)

    def show(self, rows: tuple[IncidentRow, ...], now: float) -> None:
        """Show ``rows``; the cursor stays on the same incident."""
        bucket = int(now // 10)  # the age column changes slowly: redraw at most every 10 s
        if rows == self._shown and bucket == self._now_bucket:
            return
        keep = self.selected_id()
        # on the first row the cursor follows the newest incident, which stays in view; an
        # operator who moved down keeps the incident they chose
        newest = keep is None or self.cursor_row == 0
        pal = Palette.of(self.app)
        self.clear()
        for r in rows:
            state = r.state + ("*" if r.acknowledged else "")
            self.add_row(
                str(r.id),
                Text(state, style=pal.state(r.state)),
                Text(severity_label(r.severity)[:4], style=pal.severity(r.severity)),
                r.category,
                r.subject,
                ago(now - r.opened_at),
                r.summary,
                key=str(r.id),
            )
        self._shown, self._now_bucket = rows, bucket
        if not newest and keep is not None and str(keep) in self.rows:
            self.move_cursor(row=self.get_row_index(str(keep)))
        else:
            self.move_cursor(row=0)
            self.scroll_home(animate=False)

    def selected_id(self) -> int | None:
        """The incident under the cursor."""
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return None if key.value is None else int(key.value)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """``enter`` on a row opens the incident."""
        event.stop()
        if event.row_key.value is not None:
            self.post_message(OpenIncident(int(event.row_key.value)))


__all__ = ["IncidentsTable"]
