"""A screen that reloads its data in a thread worker and re-arms its timer only when the last
load has been shown, so refreshes never overlap and no I/O runs on the event loop."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input

if TYPE_CHECKING:
    from ascend_doctor.tui.app import DoctorApp

T = TypeVar("T")


class RefreshingScreen(Screen[None], Generic[T]):
    """Subclasses implement ``load()`` (thread, returns data) and ``show(data)`` (loop)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.loads = 0
        """How many loads were shown (tests wait on it)."""
        self.last_refresh_s = 0.0
        """Load plus show time of the last refresh."""
        self.last_show_s = 0.0
        """Of which showing it on the event loop."""
        self._loading = False
        self._timer: Any = None

    @property
    def doctor(self) -> DoctorApp:
        """The app, typed."""
        return cast("DoctorApp", self.app)

    def load(self) -> T:
        """Read what the screen shows (runs in a worker thread)."""
        raise NotImplementedError

    def show(self, data: T) -> None:
        """Display loaded data (runs on the event loop)."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Note what ``load`` needs from the widgets (on the event loop, before the worker)."""

    def on_mount(self) -> None:
        """First load."""
        self.request_refresh()

    def on_screen_resume(self) -> None:
        """Back on top: refresh now (the timer stopped while hidden)."""
        self.request_refresh()

    def request_refresh(self) -> None:
        """Start a load unless one is running."""
        if self._loading or not self.is_attached:
            return
        self._loading = True
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self.prepare()
        self.run_worker(self._load_thread, thread=True, group="refresh", exit_on_error=False)

    def _load_thread(self) -> None:
        t0 = time.perf_counter()
        try:
            data: T | Exception = self.load()
        except Exception as exc:  # shown on screen; the next refresh tries again
            data = exc
        self.app.call_from_thread(self._loaded, data, t0)

    def _loaded(self, data: T | Exception, t0: float) -> None:
        self._loading = False
        if not self.is_attached:
            return
        t1 = time.perf_counter()
        if isinstance(data, Exception):
            self.show_error(data)
        else:
            self.show(data)
        t2 = time.perf_counter()
        self.last_show_s, self.last_refresh_s = t2 - t1, t2 - t0
        if not isinstance(data, Exception):
            self.loads += 1
        if self.is_current:
            self._timer = self.set_timer(self.doctor.interval, self.request_refresh)

    def show_error(self, exc: Exception) -> None:
        """A load failed: say so (the screen keeps what it showed)."""
        self.notify(f"{type(exc).__name__}: {exc}", severity="error", timeout=3)


def search_key(action: str, description: str) -> Binding:
    """``/`` opening a screen's search or filter box. A priority key, acted on as it arrives:
    the box has the focus before the next key is dispatched (over SSH a burst like "/qa"
    arrives in one read; handled late, the "q" after it would reach the widget that had the
    focus, and the quit key)."""
    return Binding("slash", action, description, priority=True)


def slash_typed(screen: Screen[None]) -> bool:
    """``/`` inside a box is a character, not the key that opens it: typed, True."""
    focused = screen.focused
    if isinstance(focused, Input):
        focused.insert_text_at_cursor("/")
        return True
    return False


__all__ = ["RefreshingScreen", "search_key", "slash_typed"]
