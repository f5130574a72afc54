"""The tailer's bookkeeping of files: sources, checkpoints, what it knows of each followed
file, how a file generation is named and fingerprinted, how bytes become whole-line chunks;
and the offline readers (``read_chunks``, ``source_kind``). ``logs.py`` is the tailer itself.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO, TypeVar

from ascend_doctor.core import newlines
from ascend_doctor.core.events import LogChunk
from ascend_doctor.core.safeio import FOLLOW_ROOTS, open_regular

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
class Tracked:
    """What the tailer knows of one followed file."""

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


def emit(
    tracked: Tracked, data: bytes, *, final: bool, max_line_bytes: int, stats: TailStats
) -> LogChunk | None:
    """The whole lines of ``data`` (read at ``tracked.offset``) as one chunk, ``tracked``
    advanced past them; None while ``data`` holds only a partial line."""
    consumed = data.rfind(b"\n") + 1
    body = data[:consumed]
    if final and consumed < len(data):
        body, consumed = data + b"\n", len(data)  # the last line of a released file
    elif consumed == 0:
        if len(data) < max_line_bytes:
            return None  # a partial line: wait for its newline
        body, consumed = data + b"\n", len(data)  # over-long: cut below
    if len(body) > max_line_bytes:
        body = cut_long_lines(body, max_line_bytes, stats)
    start = tracked.offset
    if not tracked.file_id:
        tracked.file_id = generation_of(tracked, data) if start == 0 else generation(tracked)
    lines = newlines.count(body)
    chunk = LogChunk(
        path=tracked.path,
        source=tracked.kind,
        offset=tracked.offset,
        data=body,
        first_line=tracked.line,
        file_id=tracked.file_id,
        lines=lines,
    )
    if tracked.line:
        tracked.line += lines
    tracked.offset += consumed
    stats.bytes_read += consumed
    stats.lines += lines
    if tracked.head_len < min(HEAD_BYTES, tracked.offset):
        # the checksum covers the first bytes once they exist; a young file grows into it
        if start == 0:
            tracked.head = checksum(data[:HEAD_BYTES])
        else:
            tracked.head = head_fd(tracked, HEAD_BYTES) or tracked.head
        tracked.head_len = int(tracked.head.partition(":")[0] or 0)
    return chunk


def cut_long_lines(body: bytes, max_line_bytes: int, stats: TailStats) -> bytes:
    """Lines over ``max_line_bytes`` cut to it (and counted)."""
    out = []
    for line in body.split(b"\n")[:-1]:
        if len(line) > max_line_bytes:
            stats.lines_cut += 1
            line = line[:max_line_bytes]
        out.append(line)
    return b"\n".join(out) + b"\n"


def lookback(path: str, size: int, lookback_bytes: int) -> int:
    """Where "the end" starts: ``lookback_bytes`` before it, at a line boundary."""
    if lookback_bytes <= 0 or size == 0:
        return size
    start = max(0, size - lookback_bytes)
    if start == 0:
        return 0
    try:
        with open_regular(path) as f:
            f.seek(start - 1)
            window = f.read(size - start + 1)
    except OSError:
        return size
    newline = window.find(b"\n")
    return size if newline < 0 else start + newline


def source_roots(sources: Iterable[Source], extra: Iterable[str] = FOLLOW_ROOTS) -> list[str]:
    """The log roots: the fixed directory of each source's path or glob, and ``extra``. A
    file is read only when its real path lies under one (a symlink out of them is not)."""
    roots = []
    for src in sources:
        fixed = re.split(r"[*?\[]", src.pattern, maxsplit=1)[0]
        roots.append(fixed if fixed.endswith("/") else os.path.dirname(fixed) or ".")
    return sorted({*roots, *extra})


def watch_dirs(sources: Iterable[Source]) -> set[str]:
    """Directories worth an inotify watch: the fixed part of each glob, when it exists."""
    dirs = set()
    for src in sources:
        fixed = re.split(r"[*?\[]", src.pattern, maxsplit=1)[0]
        d = fixed if fixed.endswith("/") else os.path.dirname(fixed)
        if d and os.path.isdir(d):
            dirs.add(os.path.normpath(d))
    # watches are recursive: a directory under another watched one needs no watch of its own
    return {d for d in dirs if not any(d != o and d.startswith(o.rstrip("/") + "/") for o in dirs)}


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
        body = buf[:cut] if cut < len(buf) else buf  # a slice of 4 MiB is a copy: one at most
        if not body.endswith(b"\n"):
            body += b"\n"
        lines = newlines.count(body)
        yield LogChunk(path, kind, offset, body, first_line=line, lines=lines)
        line += lines
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
    if name.startswith(("messages", "kern.log", "syslog", "dmesg", "journal", "kmsg")):
        return "host"
    return "server"


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def checksum(data: bytes) -> str:
    return f"{len(data)}:{hashlib.blake2b(data, digest_size=8).hexdigest()}"


def head_of(path: str, length: int) -> str | None:
    """``"<n>:<checksum>"`` of the first ``length`` bytes (fewer if the file is shorter)."""
    try:
        with open_regular(path) as f:
            return checksum(f.read(length))
    except OSError:
        return None


def head_fd(tracked: Tracked, length: int) -> str | None:
    """The first-bytes checksum read through the open descriptor: the path may already
    name another file (this one was just rotated away)."""
    if tracked.fh is None:
        return head_of(tracked.path, length)
    try:
        return checksum(os.pread(tracked.fh.fileno(), length, 0))
    except OSError:
        return None


def generation(tracked: Tracked) -> str:
    """A generation is named after its first line: the same content gets the same name in
    every run of the doctor and in every copy (copytruncate), so its lines are deduplicated
    even when a checkpoint or the copy's origin was lost; a truncated and rewritten file
    starts with another (timestamped) first line, hence another name."""
    first = b""
    try:
        if tracked.fh is not None:
            first = os.pread(tracked.fh.fileno(), FIRST_LINE_BYTES, 0)
        else:
            with open_regular(tracked.path) as f:
                first = f.read(FIRST_LINE_BYTES)
    except OSError:
        pass
    end = first.find(b"\n")
    first = first if end < 0 else first[:end]
    return name_of(first)


def name_of(first_line: bytes) -> str:
    return f"L{len(first_line)}:{hashlib.blake2b(first_line, digest_size=10).hexdigest()}"


def generation_of(tracked: Tracked, start_of_file: bytes) -> str:
    """``_generation`` from bytes already read from offset 0."""
    end = start_of_file.find(b"\n", 0, FIRST_LINE_BYTES)
    first = start_of_file[: end if end >= 0 else FIRST_LINE_BYTES]
    return name_of(first)


def as_pair(saved: Checkpoint | None) -> tuple[int, str] | None:
    return None if saved is None else (saved.offset, saved.file_id)


def close(tracked: Tracked) -> None:
    if tracked.fh is not None:
        tracked.fh.close()
        tracked.fh = None


def bound(d: OrderedDict[K, V]) -> None:
    while len(d) > REMEMBERED:
        d.popitem(last=False)


def last_lines(path: Path | str | None, count: int = 20, max_bytes: int = 65536) -> list[str]:
    """The last ``count`` lines of a file (from at most its last ``max_bytes``); [] if none."""
    if path is None:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[-count:] if size <= max_bytes else lines[1:][-count:]


__all__ = [
    "FIRST_LINE_BYTES",
    "HEAD_BYTES",
    "MAX_OPEN",
    "READ_BYTES",
    "REMEMBERED",
    "SNIFF_BYTES",
    "Checkpoint",
    "Checkpoints",
    "Source",
    "TailStats",
    "Tracked",
    "as_pair",
    "bound",
    "checksum",
    "close",
    "cut_long_lines",
    "emit",
    "generation",
    "generation_of",
    "head_fd",
    "head_of",
    "is_glob",
    "last_lines",
    "lookback",
    "name_of",
    "read_chunks",
    "source_kind",
    "source_roots",
    "watch_dirs",
]
