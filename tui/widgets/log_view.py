"""A virtual line list over a file of any size: the lines come from a :class:`LineIndex` by
byte offset and only the visible ones are read and rendered (the Line API), as in toolong.

File reads happen in thread workers; ``render_line`` only looks at a small cache of the lines
around the viewport and asks for a fetch when it scrolls past it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ascend_doctor.tui.logindex import LineIndex

MARGIN = 200  # lines cached above and below the viewport


class LogView(ScrollView, can_focus=True):
    """Scrollable view of one log file; follows its end until the operator scrolls up."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_up", "up", show=False),
        Binding("down", "scroll_down", "down", show=False),
        Binding("pageup", "page_up", "page up", show=False),
        Binding("pagedown", "page_down", "page down", show=False),
        Binding("home", "scroll_home", "top", show=False),
        Binding("end", "follow", "end", show=False),
        # long lines scroll sideways (a narrow SSH terminal cuts nothing for good)
        Binding("left", "scroll_left", "left", show=False),
        Binding("right", "scroll_right", "right", show=False),
    ]

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.index: LineIndex | None = None
        self.follow = True
        self.match_line: int | None = None
        self.needle = ""
        self._first = 0
        self._cache: list[str] = []
        self._width = 0
        self._fetching = False

    # -- called from worker threads ----------------------------------------------------------

    @staticmethod
    def window(index: LineIndex, height: int, top: int, follow: bool) -> tuple[int, list[str]]:
        """The lines around the viewport (thread side: reads the file)."""
        if follow:
            top = max(0, len(index) - height)
        first = max(0, top - MARGIN)
        return first, index.lines(first, height + 2 * MARGIN)

    # -- on the event loop -------------------------------------------------------------------

    def set_index(self, index: LineIndex | None) -> None:
        """Show another file."""
        self.index = index
        self.follow = True
        self.match_line = None
        self._cache, self._first, self._width = [], 0, 0
        self.virtual_size = Size(0, 0)
        self.refresh()

    def show(self, count: int, first: int, lines: list[str]) -> None:
        """A fresh window of lines (from a refresh or a fetch)."""
        self._first, self._cache = first, lines
        self._width = max([self._width, *(len(line) + 8 for line in lines[:2000])])
        self.virtual_size = Size(self._width, count)
        if self.follow:
            self.scroll_to(y=max(0, count - self.scrollable_content_region.height), animate=False)
        self.refresh()

    def jump_to(self, line: int) -> None:
        """Stop following and put ``line`` in view, marked."""
        self.follow = False
        self.match_line = line
        self.scroll_to(y=max(0, line - self.scrollable_content_region.height // 2), animate=False)
        self._fetch()
        self.refresh()

    def action_follow(self) -> None:
        """``end``: follow the end of the file again."""
        self.follow = True
        self.scroll_end(animate=False)

    def watch_scroll_y(self, old: float, new: float) -> None:
        """Scrolling up stops following; scrolling to the end resumes it."""
        super().watch_scroll_y(old, new)
        if new < old:
            self.follow = False
        elif new >= self.max_scroll_y:
            self.follow = True
        top = int(new)
        height = self.scrollable_content_region.height
        if top < self._first or top + height > self._first + len(self._cache):
            self._fetch()

    def _fetch(self) -> None:
        if self.index is None or self._fetching:
            return
        self._fetching = True
        index, height, top = self.index, self.scrollable_content_region.height, int(self.scroll_y)

        def work() -> None:
            first, lines = self.window(index, height, top, False)
            self.app.call_from_thread(self._fetched, index, first, lines)

        self.run_worker(work, thread=True, group="log-fetch")

    def _fetched(self, index: LineIndex, first: int, lines: list[str]) -> None:
        self._fetching = False
        if index is self.index:
            self.show(len(index), first, lines)

    def render_line(self, y: int) -> Strip:
        """One visible line from the cache (blank until fetched)."""
        scroll_x, scroll_y = self.scroll_offset
        idx = scroll_y + y
        width = self.scrollable_content_region.width
        count = self.virtual_size.height
        if idx >= count:
            return Strip.blank(width, self.rich_style)
        k = idx - self._first
        line = self._cache[k] if 0 <= k < len(self._cache) else ""
        gutter = len(str(max(1, count)))
        text = Text(f"{idx + 1:>{gutter}} ", style="dim")
        body = Text(line.replace("\t", "    ").replace("\r", ""))
        if self.needle:
            body.highlight_words([self.needle], style="reverse", case_sensitive=False)
        if idx == self.match_line:
            body.stylize(Style(bold=True, underline=True))
        text.append_text(body)
        segments = [Segment(s.text, s.style) for s in text.render(self.app.console)]
        return (
            Strip(segments)
            .crop(scroll_x, scroll_x + width)
            .extend_cell_length(width, self.rich_style)
        )


__all__ = ["LogView"]
