"""A trace as a waterfall: the span tree on the left, timing bars on the right. Moving the
cursor tells the screen which span is chosen (its detail sits in a fixed side panel, so the
rows never move)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.events import Resize
from textual.widgets import DataTable

from ascend_doctor.core.store import SpanRecord
from ascend_doctor.tui.messages import SpanChosen
from ascend_doctor.tui.render import Palette
from ascend_doctor.tui.waterfall_model import WaterfallRow, duration_text, waterfall

NAME_WIDTH = 30


class Waterfall(DataTable[Any]):
    """Rows keyed by span id."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(cursor_type="row", **kw)
        self._rows: list[WaterfallRow] = []
        self._spans: tuple[SpanRecord, ...] = ()
        self._bar_width = 30
        self._name_width = NAME_WIDTH

    def on_mount(self) -> None:
        """Columns."""
        self._columns()

    def _columns(self) -> None:
        self.add_column("span", key="span", width=self._name_width)
        self.add_column("took", key="took", width=8)
        self.add_column("timeline", key="timeline")

    def show(self, spans: Sequence[SpanRecord]) -> None:
        """Show a trace (redrawn only when its spans changed)."""
        spans = tuple(spans)
        if spans == self._spans:
            return
        self._spans = spans
        self._rows = waterfall(spans)
        self._draw()

    def on_resize(self, event: Resize) -> None:
        """The tree takes up to a third of the width, the bars what is left."""
        name = max(12, min(NAME_WIDTH, event.size.width // 3))
        width = max(8, event.size.width - name - 8 - 7)
        if (name, width) != (self._name_width, self._bar_width):
            self._name_width, self._bar_width = name, width
            self.clear(columns=True)
            self._columns()
            self._draw()

    def _draw(self) -> None:
        keep = self.chosen()
        pal = Palette.of(self.app)
        self.clear()
        for row in self._rows:
            s = row.span
            name = Text("  " * row.depth + ("└ " if row.depth else "") + s.name)
            if s.status.startswith("error"):
                name.stylize(pal.severity(30))
            self.add_row(
                name,
                duration_text(s.end_ns - s.start_ns),
                self._bar(row, pal),
                key=s.span_id,
            )
        if keep is not None and keep.span_id in self.rows:
            self.move_cursor(row=self.get_row_index(keep.span_id))
        self.post_message(SpanChosen(self.chosen()))

    def _bar(self, row: WaterfallRow, pal: Palette) -> Text:
        w = self._bar_width
        start = min(w - 1, int(row.start * w))
        length = max(1, round(row.width * w))
        length = min(length, w - start)
        colour = pal.error if row.span.status.startswith("error") else pal.accent
        text = Text(" " * start)
        text.append("█" * length, style=colour)
        return text

    @property
    def spans(self) -> tuple[SpanRecord, ...]:
        """The spans shown."""
        return self._spans

    def chosen(self) -> SpanRecord | None:
        """The span under the cursor."""
        if not self.row_count or not self._rows:
            return None
        idx = self.cursor_coordinate.row
        return self._rows[idx].span if 0 <= idx < len(self._rows) else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The cursor moved: tell the screen."""
        event.stop()
        self.post_message(SpanChosen(self.chosen()))


__all__ = ["Waterfall"]
