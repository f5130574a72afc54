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
import logging
import os
import stat
from collections import OrderedDict
from collections.abc import Iterable

from ascend_doctor.collectors.inotify import Waker
from ascend_doctor.collectors.log_files import (
    HEAD_BYTES,
    MAX_OPEN,
    READ_BYTES,
    SNIFF_BYTES,
    Checkpoint,
    Checkpoints,
    Source,
    TailStats,
    Tracked,
    as_pair,
    bound,
    checksum,
    close,
    emit,
    generation_of,
    head_fd,
    head_of,
    is_glob,
    lookback,
    read_chunks,
    source_kind,
    source_roots,
    watch_dirs,
)
from ascend_doctor.core.events import LogChunk
from ascend_doctor.core.safeio import FOLLOW_ROOTS, open_regular

log = logging.getLogger(__name__)


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
        roots: Iterable[str] | None = None,
    ) -> None:
        self.sources = list(sources)
        self.roots = source_roots(self.sources, FOLLOW_ROOTS if roots is None else roots)
        """Where a followed file's real path must lie (a symlink out of them is not read)."""
        self.checkpoints = checkpoints
        self.read_from = read_from
        self.lookback_bytes = lookback_bytes
        self.max_line_bytes = max_line_bytes
        self.first_start = first_start
        self.stats = TailStats()
        self._files: dict[str, Tracked] = {}
        self._by_inode: OrderedDict[tuple[int, int], Tracked] = OrderedDict()
        self._by_head: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self._binary: set[tuple[int, int]] = set()
        self._first_pass = True
        self._polls = 0
        self._dirty: dict[str, tuple[str, Checkpoint]] = {}
        self.more = False  # the last poll left bytes unread (a read is READ_BYTES at most)

    def paths(self) -> list[str]:
        """Files currently followed."""
        return [p for p, t in self._files.items() if not t.gone]

    def watch_dirs(self) -> set[str]:
        """Directories worth an inotify watch: the fixed part of each glob, when it exists.

        Never a parent further up: a recursive watch of a home directory would flood the
        inotify queue. A directory that appears later is found by the stat pass."""
        return watch_dirs(self.sources)

    def poll(self, names: bool = True) -> list[LogChunk]:
        """One stat-and-read pass over every source. ``names=False`` looks only at the files
        followed already and the plain paths (no glob: inotify said no name changed).
        ``more`` tells afterwards whether a file had more than one read's worth."""
        self._polls += 1
        self.more = False
        chunks: list[LogChunk] = []
        seen: set[str] = set()
        for src in self.sources:
            fixed = not is_glob(src.pattern)
            paths = [src.pattern] if fixed else sorted(glob.glob(src.pattern)) if names else []
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
            close(tracked)

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
        if not stat.S_ISREG(st.st_mode):
            # a FIFO would block the daemon's one loop; a device or a socket is no log
            self._error(path, "not a regular file: not read")
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
            and head_fd(tracked, tracked.head_len) != tracked.head
        ):
            # shrank, or was truncated and grew past the old offset between two looks
            out += self._truncated(tracked, st)
        if st.st_size > tracked.offset:
            out += self._read(tracked)
        return out

    def _start(self, path: str, kind: str, st: os.stat_result) -> Tracked | None:
        key = (st.st_dev, st.st_ino)
        if key in self._binary:
            return None
        identity = f"{st.st_dev}:{st.st_ino}"
        try:
            fh = open_regular(path, self.roots)
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
        head = checksum(sniff[:HEAD_BYTES])
        offset, line, file_id = self._position(path, st, identity, key, head)
        tracked = Tracked(path, kind, st.st_dev, st.st_ino, offset, file_id, fh, line=line)
        # name and fingerprint the file from the bytes read now, never from a later read
        # that may already see a truncated and rewritten file
        tracked.head, tracked.head_len = head, len(sniff[:HEAD_BYTES])
        if not tracked.file_id and b"\n" in sniff:
            tracked.file_id = generation_of(tracked, sniff)
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
            known.head_len <= 0 or head_of(path, known.head_len) == known.head
        ):
            # the same inode under another name (a rename rotation the sources also match)
            return known.offset, 0, known.file_id
        saved = self.checkpoints.get(identity)
        if saved is not None:
            length = int(saved.head.partition(":")[0] or 0)
            if head_of(path, length) != saved.head:
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
                or as_pair(self.checkpoints.by_head(head))
            )
            if copy is not None:
                # a copytruncate copy: continue where the original was, under its file_id
                self.stats.copies_continued += 1
                return min(copy[0], st.st_size), 0, copy[1]
        if self.first_start and self._first_pass and self.read_from == "end":
            return lookback(path, st.st_size, self.lookback_bytes), 0, fresh
        return 0, 1, fresh

    def _truncated(self, tracked: Tracked, st: os.stat_result) -> list[LogChunk]:
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
            bound(self._by_head)
        tracked.offset, tracked.line = 0, 1
        tracked.file_id = ""  # the new generation is named after its first line
        tracked.head, tracked.head_len = "", -1
        return []

    def _read(self, tracked: Tracked) -> list[LogChunk]:
        if tracked.fh is None:
            try:
                tracked.fh = open_regular(tracked.path, self.roots)
            except OSError as exc:
                self._error(tracked.path, f"cannot open: {exc.strerror}")
                return []
        try:
            tracked.fh.seek(tracked.offset)
            data = tracked.fh.read(READ_BYTES)
        except OSError as exc:
            self._error(tracked.path, f"cannot read: {exc.strerror}")
            return []
        self.more |= len(data) == READ_BYTES
        tracked.activity = self._polls
        if tracked.head_len > 0 and head_fd(tracked, tracked.head_len) != tracked.head:
            # truncated and rewritten while we read: these bytes may be the new generation's
            # (they are read again from its start) or the old one's (they are in its copy)
            try:
                st = os.fstat(tracked.fh.fileno())
            except OSError:
                return []
            return self._truncated(tracked, st)
        return self._emit(tracked, data, final=False)

    def _release(self, tracked: Tracked) -> list[LogChunk]:
        """Read a file that was rotated away or deleted to its end, then release it."""
        out: list[LogChunk] = []
        if tracked.fh is not None:
            try:
                if tracked.head_len > 0 and head_fd(tracked, tracked.head_len) != tracked.head:
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
        close(tracked)
        tracked.gone = True
        self._remember(tracked)
        return out

    def _remember(self, tracked: Tracked) -> None:
        self._by_inode[(tracked.dev, tracked.ino)] = tracked
        self._by_inode.move_to_end((tracked.dev, tracked.ino))
        bound(self._by_inode)

    def _close_idle(self) -> None:
        open_files = [t for t in self._files.values() if t.fh is not None]
        if len(open_files) <= MAX_OPEN:
            return
        for tracked in sorted(open_files, key=lambda t: t.activity)[: len(open_files) - MAX_OPEN]:
            close(tracked)  # reopened by path when it grows again

    def _emit(self, tracked: Tracked, data: bytes, *, final: bool) -> list[LogChunk]:
        """Hand out the whole lines of ``data`` (read at ``tracked.offset``) and advance."""
        chunk = emit(
            tracked, data, final=final, max_line_bytes=self.max_line_bytes, stats=self.stats
        )
        if chunk is None:
            return []
        identity = f"{tracked.dev}:{tracked.ino}"
        self._dirty[identity] = (
            tracked.path,
            Checkpoint(tracked.offset, tracked.head, tracked.file_id),
        )
        return [chunk]

    def _error(self, path: str, why: str) -> None:
        self.stats.errors += 1
        if path not in self.stats.error_paths:
            self.stats.error_paths.add(path)
            log.warning("%s: %s; skipping it", path, why)


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
