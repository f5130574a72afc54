"""Inotify (watchdog) wake-ups for the tailer: the watcher thread only wakes the loop."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)


_CONTENT_ONLY = frozenset({"modified", "opened", "closed", "closed_no_write"})
"""watchdog event types that change what is in a file, not which files there are."""


class Waker:
    """Wakes the tailer early when inotify reports a change (watchdog, in its own thread).

    ``wake(names_changed)`` is called once per burst: a writer appending to 16 files makes
    16 events, and while one wake-up is pending the others only note whether a file
    appeared, moved or went (then the tailer looks for new names again)."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._observer: object | None = None
        self._lock = threading.Lock()
        self._pending = False
        self._names_changed = False

    def taken(self) -> bool:
        """Called by the woken side before it reads: the next event wakes it again. True
        when a file appeared, moved or went since the last call."""
        with self._lock:
            self._pending = False
            changed, self._names_changed = self._names_changed, False
        return changed

    def _event(self, kind: str) -> None:
        with self._lock:
            if kind not in _CONTENT_ONLY:
                self._names_changed = True
            if self._pending:
                return
            self._pending = True
        self._wake()

    def start(self, dirs: Iterable[str]) -> bool:
        """Watch ``dirs``; False when watchdog or inotify is not available."""
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:  # pragma: no cover - watchdog is a dependency
            return False
        event = self._event
        # watchdog's recursive inotify watch warns when a directory created under it (a new
        # device-N/ of CANN) is added twice; the watch still works, the warning is noise.
        warnings.filterwarnings(
            "ignore", message="Callback with id", category=RuntimeWarning, module="watchdog"
        )

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, e: object) -> None:
                event(str(getattr(e, "event_type", "")))

        observer = Observer()
        for d in dirs:
            if os.path.isdir(d):
                observer.schedule(_Handler(), d, recursive=True)
        try:
            observer.start()
        except OSError as exc:
            log.warning("inotify unavailable (%s); relying on the stat pass", exc)
            return False
        self._observer = observer
        return True

    @property
    def watching(self) -> bool:
        """True while inotify reports changes (else only the stat pass finds them)."""
        return self._observer is not None

    def stop(self) -> None:
        """Stop watching."""
        observer = self._observer
        if observer is not None:
            observer.stop()  # type: ignore[attr-defined]
            observer.join(timeout=2)  # type: ignore[attr-defined]
            self._observer = None


__all__ = ["Waker"]
