"""The tailer: follows log files and globs and hands whole-line chunks onward, losing none.

- Identity. A file is (device, inode) plus a generation that changes when it is
  truncated or its first bytes change (inode reuse); ``file_id`` names that generation
  so that (file_id, offset) names one line for ever, and findings are deduplicated by it.
- Rotation. Rename + create, delete + recreate and a switched symlink change the inode
  behind a path: the old file is read to its end through the descriptor still open on
  it before it is released. A rotated file that the sources also match (``app.log*``)
  is recognised by its inode and continued where it was, not read twice. Copytruncate
  leaves a copy whose first bytes equal the original's: the copy is continued from the
  original's offset under the original's ``file_id``, so the lines written between the
  last read and the truncation are read once, from the copy.
- Checkpoints. Offsets are saved in the store after the findings of the lines before
  them are stored (at least once); duplicates after a crash are dropped by file_id and
  offset. A checkpoint past the end of its file or whose first-bytes checksum no longer
  matches is discarded with a counted warning.
- Start. At the doctor's very first start, files that exist are read from their end
  (or a look-back window before it); everything found later, and everything unknown
  at a restart, is read from its beginning.
- Bad input. Over-long lines are cut and counted, binary files are skipped with a
  warning, vanished files are finished and released, unreadable ones are reported once.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, BinaryIO, TypeVar

from ascend_doctor.collectors.inotify import Waker
from ascend_doctor.core.events import LogChunk

log = logging.getLogger(__name__)
K = TypeVar("K")
V = TypeVar("V")

HEAD_BYTES = 256  # the first-bytes checksum covers this many bytes once the file has them
READ_BYTES = 1 << 20  # at most this much per file per read, so one flood cannot starve others
SNIFF_BYTES = 8192  # a NUL in the first bytes marks a binary file
FIRST_LINE_BYTES = 4096  # a generation is named after (at most) this much of its first line
MAX_OPEN = 256  # descriptors kept open; idle files at their end are closed beyond this
REMEMBERED = 4096  # released files remembered by inode and by first bytes


@dataclass(frozen=True, slots=True)
class Source:
    """A file or glob to follow and the stream kind of its lines."""

    pattern: str
    """Path or glob."""
    kind: str
    """``server``, ``plog``, ``device``, ``slog`` or ``host``."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where reading of one file stopped."""

    offset: int
    """Bytes consumed."""
    head: str
    """``"<n>:<checksum>"`` of the file's first n bytes."""
    file_id: str
    """The generation the offset belongs to."""


@dataclass
class _Tracked:
    path: str
    kind: str
    dev: int
    ino: int
    offset: int
    file_id: str
    fh: BinaryIO | None = None
    head: str = ""
    head_len: int = -1
    line: int = 0  # lines read so far when the file was read from its start, else 0
    gone: bool = False
    activity: int = 0  # poll number of the last read


@dataclass
class TailStats:
    """Counters for telemetry."""

    files: int = 0
    bytes_read: int = 0
    lines: int = 0
    rotations: int = 0
    truncations: int = 0
    copies_continued: int = 0
    checkpoint_resets: int = 0
    lines_cut: int = 0
    binary_skipped: int = 0
    errors: int = 0
    error_paths: set[str] = field(default_factory=set)


class Checkpoints:
    """Where offsets are kept: the store in the daemon, a dict in tests."""

    def get(self, identity: str) -> Checkpoint | None:  # pragma: no cover - interface
        """The checkpoint of a (device:inode) identity."""
        raise NotImplementedError

    def by_head(self, head: str) -> Checkpoint | None:  # pragma: no cover - interface
        """A checkpoint of some file whose first bytes have this checksum."""
        raise NotImplementedError

    def put(self, items: list[tuple[str, str, Checkpoint]]) -> None:  # pragma: no cover
        """Save (identity, path, checkpoint) triples."""
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
        first_start: bool = True,
    ) -> None:
        self.sources = list(sources)
        self.checkpoints = checkpoints
        self.read_from = read_from
        self.lookback_bytes = lookback_bytes
        self.max_line_bytes = max_line_bytes
        self.first_start = first_start
        self.stats = TailStats()
        self._files: dict[str, _Tracked] = {}
        self._by_inode: OrderedDict[tuple[int, int], _Tracked] = OrderedDict()
        self._by_head: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self._binary: set[tuple[int, int]] = set()
        self._first_pass = True
        self._polls = 0
        self._dirty: dict[str, tuple[str, Checkpoint]] = {}

    def paths(self) -> list[str]:
        """Files currently followed."""
        return [p for p, t in self._files.items() if not t.gone]

    def watch_dirs(self) -> set[str]:
        """Directories worth an inotify watch: the fixed part of each glob, when it exists.

        Never a parent further up: a recursive watch of a home directory would flood the
        inotify queue. A directory that appears later is found by the stat pass."""
        dirs = set()
        for src in self.sources:
            fixed = re.split(r"[*?\[]", src.pattern, maxsplit=1)[0]
            d = fixed if fixed.endswith("/") else os.path.dirname(fixed)
            if d and os.path.isdir(d):
                dirs.add(os.path.normpath(d))
        # watches are recursive: a directory under another watched one needs no watch of its own
        return {
            d for d in dirs if not any(d != o and d.startswith(o.rstrip("/") + "/") for o in dirs)
        }

    def poll(self) -> list[LogChunk]:
        """One stat-and-read pass over every source."""
        self._polls += 1
        chunks: list[LogChunk] = []
        seen: set[str] = set()
        for src in self.sources:
            paths = sorted(glob.glob(src.pattern)) if _is_glob(src.pattern) else [src.pattern]
            for path in paths:
                if path not in seen:
                    seen.add(path)
                    chunks.extend(self._visit(path, src.kind))
        for path, tracked in list(self._files.items()):
            if path not in seen and not tracked.gone:
                chunks.extend(self._visit(path, tracked.kind))
        self._first_pass = False
        self._close_idle()
        self.stats.files = sum(1 for t in self._files.values() if not t.gone)
        return chunks

    def commit(self) -> None:
        """Checkpoint what was handed out; call after its findings are stored (at least once)."""
        if self._dirty:
            self.checkpoints.put([(i, p, c) for i, (p, c) in self._dirty.items()])
            self._dirty = {}

    def close(self) -> None:
        """Release every open file."""
        for tracked in self._files.values():
            _close(tracked)

    # -- one file -------------------------------------------------------------------------------

    def _visit(self, path: str, kind: str) -> list[LogChunk]:
        tracked = self._files.get(path)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if tracked is not None and not tracked.gone:
                return self._release(tracked)
            return []
        except OSError as exc:
            self._error(path, f"cannot stat: {exc.strerror}")
            return []
        out: list[LogChunk] = []
        if (
            tracked is not None
            and not tracked.gone
            and (tracked.dev, tracked.ino)
            != (
                st.st_dev,
                st.st_ino,
            )
        ):
            # rename + create, delete + recreate or a switched symlink
            self.stats.rotations += 1
            out = self._release(tracked)
            tracked = None
        if tracked is None or tracked.gone:
            tracked = self._start(path, kind, st)
            if tracked is None:
                return out
        if st.st_size < tracked.offset or (
            st.st_size > tracked.offset
            and tracked.head_len > 0
            and _head_fd(tracked, tracked.head_len) != tracked.head
        ):
            # shrank, or was truncated and grew past the old offset between two looks
            out += self._truncated(tracked, st)
        if st.st_size > tracked.offset:
            out += self._read(tracked)
        return out

    def _start(self, path: str, kind: str, st: os.stat_result) -> _Tracked | None:
        key = (st.st_dev, st.st_ino)
        if key in self._binary:
            return None
        identity = f"{st.st_dev}:{st.st_ino}"
        try:
            fh = open(path, "rb")
            sniff = fh.read(SNIFF_BYTES)
        except OSError as exc:
            self._error(path, f"cannot open: {exc.strerror}")
            return None
        if b"\0" in sniff:
            fh.close()
            self._binary.add(key)
            self.stats.binary_skipped += 1
            log.warning("%s: binary data (NUL bytes); not following it", path)
            return None
        head = _checksum(sniff[:HEAD_BYTES])
        offset, line, file_id = self._position(path, st, identity, key, head)
        tracked = _Tracked(path, kind, st.st_dev, st.st_ino, offset, file_id, fh, line=line)
        # name and fingerprint the file from the bytes read now, never from a later read
        # that may already see a truncated and rewritten file
        tracked.head, tracked.head_len = head, len(sniff[:HEAD_BYTES])
        if not tracked.file_id and b"\n" in sniff:
            tracked.file_id = _generation_of(tracked, sniff)
        tracked.activity = self._polls
        self._files[path] = tracked
        self._remember(tracked)
        return tracked

    def _position(
        self, path: str, st: os.stat_result, identity: str, key: tuple[int, int], head: str
    ) -> tuple[int, int, str]:
        """(offset, first line number or 0, file_id) to start a newly seen path at."""
        fresh = ""  # named after its first line at the first read (see _generation)
        known = self._by_inode.get(key)
        if known is not None and (
            known.head_len <= 0 or _head_of(path, known.head_len) == known.head
        ):
            # the same inode under another name (a rename rotation the sources also match)
            return known.offset, 0, known.file_id
        saved = self.checkpoints.get(identity)
        if saved is not None:
            length = int(saved.head.partition(":")[0] or 0)
            if _head_of(path, length) != saved.head:
                self.stats.checkpoint_resets += 1
                log.warning("%s: checkpoint belongs to an older file; reading from the start", path)
                return 0, 1, fresh
            if saved.offset > st.st_size:
                self.stats.checkpoint_resets += 1
                log.warning(
                    "%s: checkpoint %d is past the end (%d); the file was truncated: reading"
                    " from the start",
                    path,
                    saved.offset,
                    st.st_size,
                )
                return 0, 1, fresh
            return saved.offset, 0, saved.file_id
        if head.startswith(f"{HEAD_BYTES}:"):
            name = os.path.basename(path)
            same = [t for t in self._files.values() if t.head == head and (t.dev, t.ino) != key]
            # logrotate names a copy after its original (app.log -> app.log.1): prefer that one
            same.sort(key=lambda t: not name.startswith(os.path.basename(t.path)))
            copy = (
                self._by_head.get(head)
                or ((same[0].offset, same[0].file_id) if same else None)
                or _as_pair(self.checkpoints.by_head(head))
            )
            if copy is not None:
                # a copytruncate copy: continue where the original was, under its file_id
                self.stats.copies_continued += 1
                return min(copy[0], st.st_size), 0, copy[1]
        if self.first_start and self._first_pass and self.read_from == "end":
            return self._lookback(path, st.st_size), 0, fresh
        return 0, 1, fresh

    def _truncated(self, tracked: _Tracked, st: os.stat_result) -> list[LogChunk]:
        """The file shrank (copytruncate or truncation in place): a new generation from 0."""
        self.stats.truncations += 1
        log.warning(
            "%s: truncated (read %d bytes; now %d bytes, other first bytes): reading it again"
            " from the start",
            tracked.path,
            tracked.offset,
            st.st_size,
        )
        if tracked.head_len == HEAD_BYTES:
            self._by_head[tracked.head] = (tracked.offset, tracked.file_id)
            _bound(self._by_head)
        tracked.offset, tracked.line = 0, 1
        tracked.file_id = ""  # the new generation is named after its first line
        tracked.head, tracked.head_len = "", -1
        return []

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
        if tracked.fh is None:
            try:
                tracked.fh = open(tracked.path, "rb")
            except OSError as exc:
                self._error(tracked.path, f"cannot open: {exc.strerror}")
                return []
        try:
            tracked.fh.seek(tracked.offset)
            data = tracked.fh.read(READ_BYTES)
        except OSError as exc:
            self._error(tracked.path, f"cannot read: {exc.strerror}")
            return []
        tracked.activity = self._polls
        if tracked.head_len > 0 and _head_fd(tracked, tracked.head_len) != tracked.head:
            # truncated and rewritten while we read: these bytes may be the new generation's
            # (they are read again from its start) or the old one's (they are in its copy)
            try:
                st = os.fstat(tracked.fh.fileno())
            except OSError:
                return []
            return self._truncated(tracked, st)
        return self._emit(tracked, data, final=False)

    def _release(self, tracked: _Tracked) -> list[LogChunk]:
        """Read a file that was rotated away or deleted to its end, then release it."""
        out: list[LogChunk] = []
        if tracked.fh is not None:
            try:
                if tracked.head_len > 0 and _head_fd(tracked, tracked.head_len) != tracked.head:
                    # it was also truncated and rewritten before it went: finish the new
                    # generation from its start (the old one's tail is in its copy)
                    self._truncated(tracked, os.fstat(tracked.fh.fileno()))
                while True:
                    tracked.fh.seek(tracked.offset)
                    data = tracked.fh.read(READ_BYTES)
                    if not data:
                        break
                    before = tracked.offset
                    out.extend(self._emit(tracked, data, final=len(data) < READ_BYTES))
                    if tracked.offset == before:
                        break
            except OSError as exc:
                self._error(tracked.path, f"cannot finish rotated file: {exc.strerror}")
        _close(tracked)
        tracked.gone = True
        self._remember(tracked)
        return out

    def _remember(self, tracked: _Tracked) -> None:
        self._by_inode[(tracked.dev, tracked.ino)] = tracked
        self._by_inode.move_to_end((tracked.dev, tracked.ino))
        _bound(self._by_inode)

    def _close_idle(self) -> None:
        open_files = [t for t in self._files.values() if t.fh is not None]
        if len(open_files) <= MAX_OPEN:
            return
        for tracked in sorted(open_files, key=lambda t: t.activity)[: len(open_files) - MAX_OPEN]:
            _close(tracked)  # reopened by path when it grows again

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
        start = tracked.offset
        if not tracked.file_id:
            tracked.file_id = _generation_of(tracked, data) if start == 0 else _generation(tracked)
        chunk = LogChunk(
            path=tracked.path,
            source=tracked.kind,
            offset=tracked.offset,
            data=body,
            first_line=tracked.line,
            file_id=tracked.file_id,
        )
        lines = body.count(b"\n")
        if tracked.line:
            tracked.line += lines
        tracked.offset += consumed
        self.stats.bytes_read += consumed
        self.stats.lines += lines
        if tracked.head_len < min(HEAD_BYTES, tracked.offset):
            # the checksum covers the first bytes once they exist; a young file grows into it
            if start == 0:
                tracked.head = _checksum(data[:HEAD_BYTES])
            else:
                tracked.head = _head_fd(tracked, HEAD_BYTES) or tracked.head
            tracked.head_len = int(tracked.head.partition(":")[0] or 0)
        identity = f"{tracked.dev}:{tracked.ino}"
        self._dirty[identity] = (
            tracked.path,
            Checkpoint(tracked.offset, tracked.head, tracked.file_id),
        )
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


def read_chunks(
    stream: IO[bytes], path: str, kind: str, *, already_read: bytes = b"", block: int = 4 << 20
) -> Iterator[LogChunk]:
    """Whole-line chunks of a whole stream (offline scans); the last line may lack a newline.
    ``already_read`` is what the caller read from the stream first (e.g. to sniff it)."""
    pending, offset, line = already_read, 0, 1
    while True:
        data = stream.read(block)
        buf = pending + data
        if not buf:
            return
        cut = buf.rfind(b"\n") + 1 if data else len(buf)
        if cut == 0:
            pending = buf
            continue
        body = buf[:cut] if buf[:cut].endswith(b"\n") else buf[:cut] + b"\n"
        yield LogChunk(path, kind, offset, body, first_line=line)
        line += body.count(b"\n")
        offset += cut
        pending = buf[cut:]


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


def _checksum(data: bytes) -> str:
    return f"{len(data)}:{hashlib.blake2b(data, digest_size=8).hexdigest()}"


def _head_of(path: str, length: int) -> str | None:
    """``"<n>:<checksum>"`` of the first ``length`` bytes (fewer if the file is shorter)."""
    try:
        with open(path, "rb") as f:
            return _checksum(f.read(length))
    except OSError:
        return None


def _head_fd(tracked: _Tracked, length: int) -> str | None:
    """The first-bytes checksum read through the open descriptor: the path may already
    name another file (this one was just rotated away)."""
    if tracked.fh is None:
        return _head_of(tracked.path, length)
    try:
        return _checksum(os.pread(tracked.fh.fileno(), length, 0))
    except OSError:
        return None


def _generation(tracked: _Tracked) -> str:
    """A generation is named after its first line: the same content gets the same name in
    every run of the doctor and in every copy (copytruncate), so its lines are deduplicated
    even when a checkpoint or the copy's origin was lost; a truncated and rewritten file
    starts with another (timestamped) first line, hence another name."""
    first = b""
    try:
        if tracked.fh is not None:
            first = os.pread(tracked.fh.fileno(), FIRST_LINE_BYTES, 0)
        else:
            with open(tracked.path, "rb") as f:
                first = f.read(FIRST_LINE_BYTES)
    except OSError:
        pass
    end = first.find(b"\n")
    first = first if end < 0 else first[:end]
    return _name(first)


def _name(first_line: bytes) -> str:
    return f"L{len(first_line)}:{hashlib.blake2b(first_line, digest_size=10).hexdigest()}"


def _generation_of(tracked: _Tracked, start_of_file: bytes) -> str:
    """``_generation`` from bytes already read from offset 0."""
    end = start_of_file.find(b"\n", 0, FIRST_LINE_BYTES)
    first = start_of_file[: end if end >= 0 else FIRST_LINE_BYTES]
    return _name(first)


def _as_pair(saved: Checkpoint | None) -> tuple[int, str] | None:
    return None if saved is None else (saved.offset, saved.file_id)


def _close(tracked: _Tracked) -> None:
    if tracked.fh is not None:
        tracked.fh.close()
        tracked.fh = None


def _bound(d: OrderedDict[K, V]) -> None:
    while len(d) > REMEMBERED:
        d.popitem(last=False)


__all__ = [
    "Checkpoint",
    "Checkpoints",
    "Source",
    "TailStats",
    "Tailer",
    "Waker",
    "read_chunks",
    "source_kind",
]
