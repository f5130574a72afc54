"""The full tail of any log source, searchable; only the visible lines are read and drawn."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from ascend_doctor.tui.logindex import LineIndex
from ascend_doctor.tui.screens.base import RefreshingScreen, search_key, slash_typed
from ascend_doctor.tui.widgets import LogView

INDEX_STEP = 4 << 20  # bytes indexed per refresh: a big file is indexed over a few refreshes


@dataclass(frozen=True)
class LogsData:
    """One refresh: the sources and the window of the shown file."""

    sources: tuple[str, ...]
    index: LineIndex | None
    count: int
    first: int
    lines: list[str]
    size: int = 0
    """The file's size at this refresh (indexing shows its progress against it)."""


class LogsScreen(RefreshingScreen[LogsData]):
    """Sources on the left, the chosen file on the right."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back_or_clear", "back"),
        search_key("search", "search"),
        Binding("n", "next_match", "next"),
        Binding("N", "previous_match", "previous"),
        Binding("end", "follow", "follow", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._sources: tuple[str, ...] = ()
        self._index: LineIndex | None = None
        self._view = (1, 0, True)  # height, top line, following: read on the loop

    def compose(self) -> ComposeResult:
        """Sources, search box, view, status."""
        with Horizontal():
            yield OptionList(id="log-sources")
            with Vertical(id="log-main"):
                yield Input(placeholder="search (enter: next match; n / N)", id="log-search")
                yield LogView(id="log-view")
                yield Static("", id="log-status")
        yield Footer()

    def on_mount(self) -> None:
        """The view has the focus."""
        self.query_one(LogView).focus()
        super().on_mount()

    def load(self) -> LogsData:
        """Sources, index growth and the visible window (worker thread)."""
        try:
            with self.doctor.source.reader() as store:
                sources = tuple(self.doctor.source.log_sources(store))
        except Exception:
            sources = tuple(self.doctor.source.log_sources(None))
        index = self._index
        if index is None and sources:
            index = LineIndex(sources[0])
        if index is None:
            return LogsData(sources, None, 0, 0, [])
        index.update(INDEX_STEP)
        try:
            size = os.path.getsize(index.path)
        except OSError:
            size = 0
        height, top, follow = self._view
        first, lines = LogView.window(index, height, top, follow)
        return LogsData(sources, index, len(index), first, lines, size)

    def prepare(self) -> None:
        """The view's size and position, for the worker."""
        view = self.query_one(LogView)
        self._view = (
            max(1, view.scrollable_content_region.height),
            int(view.scroll_y),
            view.follow,
        )

    def show(self, data: LogsData) -> None:
        """Update the source list and the view."""
        opts = self.query_one(OptionList)
        if data.sources != self._sources:
            self._sources = data.sources
            opts.clear_options()
            opts.add_options([Option(self.doctor.source.display(p), id=p) for p in data.sources])
        view = self.query_one(LogView)
        if data.index is not None and self._index is None:
            self._index = data.index
            view.set_index(data.index)
        if data.index is self._index and data.index is not None:
            view.show(data.count, data.first, data.lines)
            name = self.doctor.source.display(data.index.path)
            state = "following" if view.follow else "paused (end follows)"
            behind = data.size - data.index.indexed
            if behind > INDEX_STEP:
                state = f"indexing {100 * data.index.indexed // max(1, data.size)}%"
            self.query_one("#log-status", Static).update(
                f"{name}: {data.count:,} line{'' if data.count == 1 else 's'}, "
                f"{data.index.indexed:,} bytes, {state}"
            )
        elif data.index is None:
            self.query_one("#log-status", Static).update("no log sources in this state dir")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Show another source."""
        path = event.option.id
        if path is None:
            return
        self._index = LineIndex(path)
        self.query_one(LogView).set_index(self._index)
        self.query_one(LogView).focus()
        self.request_refresh()

    def action_search(self) -> None:
        """``/``: show and focus the search box."""
        if slash_typed(self):
            return
        box = self.query_one(Input)
        box.add_class("open")
        # now, not at the next idle as focus() would: keys typed right after / go to the box
        self.set_focus(box)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Search forward from the current position."""
        self.query_one(LogView).needle = event.value
        self.set_focus(self.query_one(LogView))
        self._search(forward=True)

    def action_next_match(self) -> None:
        """``n``: next match."""
        self._search(forward=True)

    def action_previous_match(self) -> None:
        """``N``: previous match."""
        self._search(forward=False)

    def action_follow(self) -> None:
        """``end``: follow the end again."""
        self.query_one(LogView).action_follow()

    def _search(self, *, forward: bool) -> None:
        view = self.query_one(LogView)
        index, needle = view.index, view.needle
        if index is None or not needle:
            return
        start = view.match_line if view.match_line is not None else int(view.scroll_y) - 1
        status = self.query_one("#log-status", Static)
        status.update(f"searching for {needle!r}...")

        def work() -> None:
            found = index.search(needle, start, forward=forward)
            self.app.call_from_thread(self._found, needle, found)

        self.run_worker(work, thread=True, group="log-search", exclusive=True)

    def _found(self, needle: str, line: int | None) -> None:
        status = self.query_one("#log-status", Static)
        if line is None:
            status.update(f"{needle!r}: no more matches")
            return
        self.query_one(LogView).jump_to(line)
        status.update(f"{needle!r}: line {line + 1:,}")

    def action_back_or_clear(self) -> None:
        """``esc``: clear the search first, then go back."""
        box = self.query_one(Input)
        view = self.query_one(LogView)
        if box.has_class("open") or view.needle:
            box.value = ""
            box.remove_class("open")
            view.needle = ""
            view.match_line = None
            view.refresh()
            self.set_focus(view)
        else:
            self.doctor.action_go_back()


__all__ = ["LogsScreen"]
