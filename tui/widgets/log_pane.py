"""The overview's live log: the tail of the server log, lines a rule matched highlighted by
severity, and a filter (``/``). A RichLog bounded by ``max_lines`` never slows the screen."""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Resize
from textual.widgets import Input, RichLog, Static

from ascend_doctor.tui.data import LogLineView, severity_label
from ascend_doctor.tui.render import Palette

KEPT = 1000
WRITTEN = 120  # new lines written per refresh at most: a live tail, the logs screen has all


class LogPane(Vertical):
    """Title, filter input (shown on ``/``) and the lines."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._lines: deque[LogLineView] = deque(maxlen=KEPT)
        self._path = ""
        self.filter_text = ""

    def compose(self) -> ComposeResult:
        """Title, filter, lines."""
        yield Static("log", id="log-title")
        yield Input(placeholder="filter the log (enter keeps it, esc clears it)", id="log-filter")
        yield RichLog(max_lines=KEPT, wrap=False, markup=False, id="log-lines")

    def show(self, path: str, title: str, lines: tuple[LogLineView, ...]) -> None:
        """Append what is new since the last call (all of it when the file changed)."""
        pane = self.query_one(RichLog)
        newest = self._lines[-1].offset if self._lines else -1
        if path != self._path or (lines and lines[-1].offset < newest):
            self._lines.clear()
            self._path = path
            newest = -1
            pane.clear()
        fresh = [ln for ln in lines if ln.offset > newest][-WRITTEN:]
        self._lines.extend(fresh)
        self.query_one("#log-title", Static).update(
            Text(
                f"log: {title or 'no log'}"
                + (f"  filter: {self.filter_text}" if self.filter_text else "")
            )
        )
        self._write(fresh)

    def _write(self, lines: list[LogLineView]) -> None:
        pane = self.query_one(RichLog)
        pal = Palette.of(self.app)
        needle = self.filter_text.lower()
        for ln in lines:
            if needle and needle not in ln.text.lower():
                continue
            text = Text(ln.text, style=pal.severity(ln.severity))
            if ln.severity is not None:
                text = Text(f"{severity_label(ln.severity)[:4]:4} ", style="bold") + text
            pane.write(text)
        if lines:
            # a write before the pane is laid out may not reach the end: follow it afterwards
            pane.call_after_refresh(pane.scroll_end, animate=False)

    def on_resize(self, event: Resize) -> None:
        """Lines written before the layout are drawn after it: follow the end again then."""
        pane = self.query_one(RichLog)
        pane.call_after_refresh(pane.scroll_end, animate=False)

    def set_filter(self, text: str) -> None:
        """Show only lines containing ``text`` (ignoring case); empty shows all."""
        self.filter_text = text
        self.query_one(RichLog).clear()
        self._write(list(self._lines))

    def open_filter(self) -> None:
        """Show and focus the filter input."""
        box = self.query_one(Input)
        box.add_class("open")
        # now, not at the next idle as focus() would: keys typed right after / go to the box
        self.screen.set_focus(box)

    def on_input_changed(self, event: Input.Changed) -> None:
        """Filter as the operator types."""
        event.stop()
        self.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """``enter`` keeps the filter and gives the focus back."""
        event.stop()
        event.input.remove_class("open")
        self.screen.set_focus(self.query_one(RichLog))

    def clear_filter(self) -> bool:
        """Clear and hide the filter; False when there was none."""
        box = self.query_one(Input)
        if not self.filter_text and not box.has_class("open"):
            return False
        box.value = ""
        box.remove_class("open")
        self.set_filter("")
        return True


__all__ = ["LogPane"]
