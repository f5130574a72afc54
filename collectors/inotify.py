"""Inotify (watchdog) wake-ups for the tailer: the watcher thread only wakes the loop."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)


class Waker:
    """Wakes the tailer early when inotify reports a change (watchdog, in its own thread)."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._observer: object | None = None
        self._lock = threading.Lock()

    def start(self, dirs: Iterable[str]) -> bool:
        """Watch ``dirs``; False when watchdog or inotify is not available."""
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:  # pragma: no cover - watchdog is a dependency
            return False
        wake = self._wake
        # watchdog's recursive inotify watch warns when a directory created under it (a new
        # device-N/ of CANN) is added twice; the watch still works, the warning is noise.
        warnings.filterwarnings(
            "ignore", message="Callback with id", category=RuntimeWarning, module="watchdog"
        )

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: object) -> None:
                wake()

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

    def stop(self) -> None:
        """Stop watching."""
        observer = self._observer
        if observer is not None:
            observer.stop()  # type: ignore[attr-defined]
            observer.join(timeout=2)  # type: ignore[attr-defined]
            self._observer = None


__all__ = ["Waker"]
