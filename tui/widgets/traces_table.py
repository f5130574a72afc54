"""Recent traces (incidents and the server's requests), filterable; ``enter`` opens one."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from ascend_doctor.tui.detail import TraceRow
from ascend_doctor.tui.messages import OpenTrace
from ascend_doctor.tui.render import Palette, date_time


class TracesTable(DataTable[Any]):
    """Rows keyed by trace id."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(cursor_type="row", **kw)
        self._all: tuple[TraceRow, ...] = ()
        self._shown: tuple[TraceRow, ...] | None = None
        self.filter_text = ""

    def on_mount(self) -> None:
        """Columns."""
        for name in ("start", "source", "incident", "trace", "took", "status"):
            self.add_column(name, key=name)

    def show(self, rows: tuple[TraceRow, ...]) -> None:
        """Show ``rows`` through the filter."""
        self._all = rows
        self._draw()

    def set_filter(self, text: str) -> None:
        """Only traces whose name, source, status or incident contain ``text``."""
        self.filter_text = text
        self._draw()

    def _draw(self) -> None:
        needle = self.filter_text.lower()
        rows = tuple(
            r
            for r in self._all
            if not needle
            or needle in f"{r.name} {r.source} {r.status} #{r.incident_id or ''}".lower()
        )
        if rows == self._shown:
            return
        self._shown = rows
        pal = Palette.of(self.app)
        self.clear()
        for r in rows:
            self.add_row(
                date_time(r.start_ns / 1e9),
                r.source,
                f"#{r.incident_id}" if r.incident_id is not None else "",
                r.name,
                f"{r.duration_ms:.1f}ms"
                if r.duration_ms < 1000
                else f"{r.duration_ms / 1000:.2f}s",
                Text(r.status, style=pal.severity(30) if r.status.startswith("error") else ""),
                key=r.trace_id,
            )

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """``enter`` opens the trace's waterfall."""
        event.stop()
        key = event.row_key.value
        if key is None:
            return
        row = next((r for r in self._all if r.trace_id == key), None)
        title = row.name if row is not None else key
        self.post_message(OpenTrace(key, title))


__all__ = ["TracesTable"]
