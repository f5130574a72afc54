"""A line index over a log file by byte offsets, so the logs screen renders only the visible
lines of a file of any size (the toolong approach). Pure file I/O; called from worker threads.
"""

from __future__ import annotations

import os
from array import array

BLOCK = 1 << 20  # bytes read per step while indexing


class LineIndex:
    """The byte offset of every line start of a growing file; re-reads only what was added."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.starts = array("q")
        """Offset of each complete line's first byte."""
        self.indexed = 0
        """Bytes indexed so far (always just after a newline)."""
        self._inode: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.starts)

    def update(self, max_bytes: int | None = None) -> int:
        """Index what was appended since the last call (from scratch after a truncation or a
        rotation); returns how many lines were added. ``max_bytes`` bounds one call's work."""
        try:
            st = os.stat(self.path)
        except OSError:
            return 0
        ident = (st.st_dev, st.st_ino)
        if ident != self._inode or st.st_size < self.indexed:
            self.starts = array("q")
            self.indexed = 0
            self._inode = ident
        before = len(self.starts)
        budget = max_bytes if max_bytes is not None else st.st_size
        with open(self.path, "rb") as fh:
            fh.seek(self.indexed)
            while budget > 0:
                data = fh.read(min(BLOCK, budget))
                if not data:
                    break
                last = data.rfind(b"\n")
                if last < 0:
                    break  # a partial line: wait for its end
                base = self.indexed
                starts = self.starts
                pos = 0
                find = data.find
                while pos <= last:
                    starts.append(base + pos)
                    pos = find(b"\n", pos) + 1
                self.indexed = base + last + 1
                budget -= last + 1
                if last + 1 < len(data):
                    fh.seek(self.indexed)
        return len(self.starts) - before

    def lines(self, first: int, count: int) -> list[str]:
        """Lines ``first`` .. ``first + count - 1`` (fewer at the end), without newlines."""
        first = max(0, first)
        last = min(len(self.starts), first + count)
        if first >= last:
            return []
        begin = self.starts[first]
        end = self.starts[last] if last < len(self.starts) else self.indexed
        try:
            with open(self.path, "rb") as fh:
                fh.seek(begin)
                data = fh.read(end - begin)
        except OSError:
            return []
        return [b.decode("utf-8", "replace") for b in data.split(b"\n")[: last - first]]

    def search(
        self, text: str, start: int, *, forward: bool = True, batch: int = 4096
    ) -> int | None:
        """The index of the next line (after/before ``start``) containing ``text``, ignoring
        case; None when there is none."""
        needle = text.lower()
        n = len(self.starts)
        if forward:
            i = start + 1
            while i < n:
                for k, line in enumerate(self.lines(i, batch)):
                    if needle in line.lower():
                        return i + k
                i += batch
        else:
            i = start - 1
            while i >= 0:
                lo = max(0, i - batch + 1)
                chunk = self.lines(lo, i - lo + 1)
                for k in range(len(chunk) - 1, -1, -1):
                    if needle in chunk[k].lower():
                        return lo + k
                i = lo - 1
        return None


__all__ = ["LineIndex"]
