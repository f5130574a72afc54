"""The tailer: follows log files and globs, hands whole-line chunks onward.

Basic but honest: offsets are checkpointed in the store keyed by file identity
(device, inode and a checksum of the first bytes), files that appear later are
read from their beginning, a file that shrank is read again from the start, and
a rotated-away file is read to its end before it is released. Inotify (watchdog)
only wakes the loop; a stat pass every ``poll_interval`` is the ground truth.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ascend_doctor.core.events import LogChunk

log = logging.getLogger(__name__)

HEAD_BYTES = 256  # identity checksum covers at most this many first bytes
READ_BYTES = 1 << 20  # at most this much per file per pass, so one flood cannot starve others


@dataclass(frozen=True, slots=True)
class Source:
    """A file or glob to follow and the stream kind of its lines."""

    pattern: str
    """Path or glob."""
    kind: str
    """``server``, ``plog``, ``device``, ``slog`` or ``host``."""


@dataclass
class _Tracked:
    path: str
    kind: str
    dev: int
    ino: int
    offset: int
    fh: BinaryIO | None = None
    head: str = ""
    head_len: int = -1
    line: int = 0  # lines read so far when the file was read from its start, else 0
    gone: bool = False


@dataclass
class TailStats:
    """Counters for telemetry."""

    files: int = 0
    bytes_read: int = 0
    lines: int = 0
    rotations: int = 0
    truncations: int = 0
    checkpoint_resets: int = 0
    lines_cut: int = 0
    errors: int = 0
    error_paths: set[str] = field(default_factory=set)


class Checkpoints:
    """Where offsets are kept: the store in the daemon, a dict in tests."""

    def get(self, identity: str) -> tuple[int, str] | None:  # pragma: no cover - interface
        """The saved (offset, head) of an identity."""
        raise NotImplementedError

    def put(self, items: list[tuple[str, str, int, str]]) -> None:  # pragma: no cover
        """Save (identity, path, offset, head) checkpoints."""
        raise NotImplementedError


class Tailer:
    """Follows sources; ``poll()`` returns the chunks of whole lines read since the last poll."""

    def __init__(
        self,
        sources: Iterable[Source],
        checkpoints: Checkpoints,
        *,
        read_from: str = "end",
        lookback_bytes: int = 0,
        max_line_bytes: int = 262144,
    ) -> None:
        self.sources = list(sources)
        self.checkpoints = checkpoints
        self.read_from = read_from
        self.lookback_bytes = lookback_bytes
        self.max_line_bytes = max_line_bytes
        self.stats = TailStats()
        self._files: dict[str, _Tracked] = {}
        self._first_pass = True
        self._dirty: list[tuple[str, str, int, str]] = []

    def add_source(self, source: Source) -> None:
        """Follow one more source (e.g. a restarted server's new log root)."""
        if source not in self.sources:
            self.sources.append(source)

    def paths(self) -> list[str]:
        """Files currently followed."""
        return [p for p, t in self._files.items() if not t.gone]

    def watch_dirs(self) -> set[str]:
        """Directories worth an inotify watch (the nearest existing parent of each glob)."""
        dirs = set()
        for src in self.sources:
            d = (
                Path(src.pattern.split("*", 1)[0]).parent
                if "*" in src.pattern
                else Path(src.pattern).parent
            )
            while not d.exists() and d != d.parent:
                d = d.parent
            dirs.add(str(d))
        # watches are recursive: a directory under another watched one needs no watch of its own
        return {
            d for d in dirs if not any(d != o and d.startswith(o.rstrip("/") + "/") for o in dirs)
        }

    def poll(self) -> list[LogChunk]:
        """One stat-and-read pass over every source."""
        chunks: list[LogChunk] = []
        seen: set[str] = set()
        for src in self.sources:
            for path in sorted(glob.glob(src.pattern)) if _is_glob(src.pattern) else [src.pattern]:
                seen.add(path)
                chunks.extend(self._visit(path, src.kind))
        for path, tracked in list(self._files.items()):
            if path not in seen and not tracked.gone:
                chunks.extend(self._visit(path, tracked.kind))
        self._first_pass = False
        self.stats.files = sum(1 for t in self._files.values() if not t.gone)
        return chunks

    def commit(self) -> None:
        """Checkpoint what was handed out; call after its findings are stored (at least once)."""
        if self._dirty:
            self.checkpoints.put(self._dirty)
            self._dirty = []

    def _visit(self, path: str, kind: str) -> list[LogChunk]:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            tracked = self._files.get(path)
            if tracked and not tracked.gone:
                return self._drain_gone(tracked)
            return []
        except OSError as exc:
            self._error(path, f"cannot stat: {exc.strerror}")
            return []
        tracked = self._files.get(path)
        out: list[LogChunk] = []
        if tracked is not None and (tracked.dev, tracked.ino) != (st.st_dev, st.st_ino):
            # rename + create, delete + recreate or a switched symlink: read the old file
            # to its end through the descriptor still open on it, then release it.
            self.stats.rotations += 1
            out = self._drain_gone(tracked)
            tracked = None
        if tracked is None or tracked.gone:
            tracked = self._start(path, kind, st)
            if tracked is None:
                return out
        if st.st_size < tracked.offset:
            self.stats.truncations += 1
            log.warning(
                "%s: shrank from %d to %d bytes; reading it again from the start",
                path,
                tracked.offset,
                st.st_size,
            )
            tracked.offset = 0
            tracked.line = 1
        if st.st_size == tracked.offset:
            return out
        return out + self._read(tracked)

    def _start(self, path: str, kind: str, st: os.stat_result) -> _Tracked | None:
        identity = f"{st.st_dev}:{st.st_ino}"
        saved = self.checkpoints.get(identity)
        if self._first_pass and self.read_from == "end":
            offset, line = self._lookback(path, st.st_size), 0
        else:
            offset, line = 0, 1
        if saved is not None:
            saved_offset, saved_head = saved
            length = int(saved_head.partition(":")[0] or 0)
            if _head(path, length) != saved_head:
                # the inode was reused by another file: the checkpoint is not this file's
                self.stats.checkpoint_resets += 1
                log.warning("%s: checkpoint belongs to an older file; discarded", path)
                offset, line = 0, 1
            elif saved_offset > st.st_size:
                self.stats.checkpoint_resets += 1
                log.warning(
                    "%s: checkpoint %d is past EOF %d; discarded", path, saved_offset, st.st_size
                )
                offset, line = 0, 1
            else:
                offset, line = saved_offset, 0
        try:
            fh = open(path, "rb")
        except OSError as exc:
            self._error(path, f"cannot open: {exc.strerror}")
            return None
        tracked = _Tracked(path, kind, st.st_dev, st.st_ino, offset, fh, line=line)
        self._files[path] = tracked
        return tracked

    def _lookback(self, path: str, size: int) -> int:
        """Where "the end" starts: ``lookback_bytes`` before it, at a line boundary."""
        if self.lookback_bytes <= 0 or size == 0:
            return size
        start = max(0, size - self.lookback_bytes)
        if start == 0:
            return 0
        try:
            with open(path, "rb") as f:
                f.seek(start - 1)
                window = f.read(size - start + 1)
        except OSError:
            return size
        newline = window.find(b"\n")
        return size if newline < 0 else start + newline

    def _read(self, tracked: _Tracked) -> list[LogChunk]:
        assert tracked.fh is not None
        try:
            tracked.fh.seek(tracked.offset)
            data = tracked.fh.read(READ_BYTES)
        except OSError as exc:
            self._error(tracked.path, f"cannot read: {exc.strerror}")
            return []
        return self._emit(tracked, data, final=False)

    def _drain_gone(self, tracked: _Tracked) -> list[LogChunk]:
        """Read a file that was rotated away or deleted to its end, then release it."""
        out: list[LogChunk] = []
        if tracked.fh is None:
            return out
        try:
            tracked.fh.seek(tracked.offset)
            while data := tracked.fh.read(READ_BYTES):
                before = tracked.offset
                out.extend(self._emit(tracked, data, final=len(data) < READ_BYTES))
                if tracked.offset == before:
                    break
                tracked.fh.seek(tracked.offset)
        except OSError as exc:
            self._error(tracked.path, f"cannot finish rotated file: {exc.strerror}")
        tracked.fh.close()
        tracked.fh = None
        tracked.gone = True
        return out

    def close(self) -> None:
        """Release every open file."""
        for tracked in self._files.values():
            if tracked.fh is not None:
                tracked.fh.close()
                tracked.fh = None

    def _emit(self, tracked: _Tracked, data: bytes, *, final: bool) -> list[LogChunk]:
        """Hand out the whole lines of ``data`` (read at ``tracked.offset``) and advance."""
        consumed = data.rfind(b"\n") + 1
        body = data[:consumed]
        if final and consumed < len(data):
            body, consumed = data + b"\n", len(data)  # the last line of a released file
        elif consumed == 0:
            if len(data) < self.max_line_bytes:
                return []  # a partial line: wait for its newline
            body, consumed = data + b"\n", len(data)  # over-long: cut below
        if len(body) > self.max_line_bytes:
            body = self._cut_long_lines(body)
        chunk = LogChunk(
            path=tracked.path,
            source=tracked.kind,
            offset=tracked.offset,
            data=body,
            first_line=tracked.line,
            file_id=f"{tracked.dev}:{tracked.ino}",
        )
        lines = body.count(b"\n")
        if tracked.line:
            tracked.line += lines
        tracked.offset += consumed
        self.stats.bytes_read += consumed
        self.stats.lines += lines
        if tracked.head_len < min(HEAD_BYTES, tracked.offset):
            # the checksum covers the first bytes once they exist; a young file grows into it
            tracked.head = _head(tracked.path, HEAD_BYTES) or tracked.head
            tracked.head_len = int(tracked.head.partition(":")[0] or 0)
        identity = f"{tracked.dev}:{tracked.ino}"
        self._dirty.append((identity, tracked.path, tracked.offset, tracked.head))
        return [chunk]

    def _cut_long_lines(self, body: bytes) -> bytes:
        out = []
        for line in body.split(b"\n")[:-1]:
            if len(line) > self.max_line_bytes:
                self.stats.lines_cut += 1
                line = line[: self.max_line_bytes]
            out.append(line)
        return b"\n".join(out) + b"\n"

    def _error(self, path: str, why: str) -> None:
        self.stats.errors += 1
        if path not in self.stats.error_paths:
            self.stats.error_paths.add(path)
            log.warning("%s: %s; skipping it", path, why)


def source_kind(path: str) -> str:
    """The stream kind of a log file, from where CANN, the driver and the host put it."""
    p = path.replace("\\", "/").lower()
    name = p.rsplit("/", 1)[-1]
    if "/plog/" in p or name.startswith("plog-"):
        return "plog"
    if "/slog/" in p or "device-os" in p or name.startswith("event_") or "slogd" in name:
        return "slog"
    if re.search(r"(?:^|/)device-\d+", p):
        return "device"
    if name.startswith(("messages", "kern.log", "syslog", "dmesg", "journal")):
        return "host"
    return "server"


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _head(path: str, length: int) -> str | None:
    """``"<n>:<checksum>"`` of the first ``length`` bytes (fewer if the file is shorter)."""
    try:
        with open(path, "rb") as f:
            data = f.read(length)
    except OSError:
        return None
    return f"{len(data)}:{hashlib.blake2b(data, digest_size=8).hexdigest()}"


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


__all__ = ["Checkpoints", "Source", "TailStats", "Tailer", "Waker", "source_kind"]
