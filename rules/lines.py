"""The lines of a chunk as evidence: each cut once, numbered incrementally, parsed once.

In a failure-dense log (a crash-looping server's is half failures) every line is evidence of
several findings (the match, and context of its neighbours'): a line is cut and decoded once
per chunk, and its number is counted from the nearest line numbered before, so the cost stays
linear in bytes whatever the density. In a benign log a chunk with one finding is walked
from its nearer end to that finding, and a chunk without findings not at all.
"""

from __future__ import annotations

from bisect import bisect_right

from ascend_doctor.core import newlines
from ascend_doctor.core.events import LogChunk, LogLine
from ascend_doctor.rules.parse import Parsed, parse

_STEP = 4096
"""A line numbered after counting more than this many bytes is kept as a landmark."""
MARK = 1 << 16
"""Bytes between the landmarks :func:`newline_marks` counts."""


def newline_marks(data: bytes) -> list[int]:
    """The newlines of ``data`` before every ``MARK`` bytes and before its end (the last
    item is the total): counted in one pass, and then no line number costs more than
    ``MARK / 2`` bytes of counting."""
    count, size = newlines.count, len(data)
    marks, total = [0], 0
    for start in range(0, size, MARK):
        total += count(data, start, start + MARK)
        marks.append(total)
    return marks


class Lines:
    """Evidence lines of one chunk, numbered from ``chunk.first_line`` (0 when unknown).

    A line's number is counted from the nearest known one: the line asked last (the engine
    asks in file order within each pass), the chunk's ends, or a landmark (a line that was
    far from every known one when it was numbered, so a later pass finds it nearby)."""

    __slots__ = ("_chunk", "_data", "_first", "_line", "_marks", "_pos", "_total", "cut")

    def __init__(self, chunk: LogChunk, marks: list[int] | None = None) -> None:
        self._chunk = chunk
        self._data = chunk.data
        self._first = chunk.first_line
        self._pos = 0
        self._line = chunk.first_line
        self._total = -1
        # landmarks: sorted byte offsets and the number of the line holding each
        self._marks: tuple[list[int], list[int]] | None = None
        if marks is not None:  # from newline_marks: the chunk's lines were counted so
            size = len(chunk.data)
            offs = [*range(0, size, MARK), size]
            self._marks = offs, [chunk.first_line + n for n in marks]
            self._total = marks[-1]
        self.cut: dict[int, LogLine] = {}
        """The lines cut so far, by their start."""

    def total(self) -> int:
        """How many newlines the chunk holds (counted by its reader, else here once)."""
        if self._total < 0:
            self._total = self._chunk.lines
            if self._total < 0:
                self._total = newlines.count(self._data)
        return self._total

    def number(self, offset: int) -> int:
        """The number of the line holding ``offset``; 0 when the chunk's is unknown."""
        if not self._first:
            return 0
        pos, count = self._pos, self._data.count
        if pos <= offset < pos + _STEP:
            line = self._line + count(b"\n", pos, offset)
        elif offset < pos < offset + _STEP:
            line = self._line - count(b"\n", offset, pos)
        else:
            line = self._far(offset)
        self._pos, self._line = offset, line
        return line

    def _far(self, offset: int) -> int:
        if self._marks is None:
            size = len(self._data)
            # the end is a landmark when the reader counted the chunk's lines
            ends = [0, size] if self._chunk.lines >= 0 else [0]
            self._marks = ends, [self._first, self._first + self._chunk.lines][: len(ends)]
        offs, nums = self._marks
        count = self._data.count
        i = bisect_right(offs, offset)  # offs[i - 1] <= offset < offs[i]
        low = offset - offs[i - 1]
        high = offs[i] - offset if i < len(offs) else None
        # the last line asked counts as a landmark too
        pos = self._pos
        if abs(offset - pos) < min(low, high if high is not None else low):
            if pos <= offset:
                return self._line + count(b"\n", pos, offset)
            return self._line - count(b"\n", offset, pos)
        if high is not None and high < low:
            line = nums[i] - count(b"\n", offset, offs[i])
        else:
            line = nums[i - 1] + count(b"\n", offs[i - 1], offset)
        if min(low, high if high is not None else low) > _STEP:
            offs.insert(i, offset)
            nums.insert(i, line)
        return line

    def at(self, start: int, number: int) -> LogLine:
        """The line starting at ``start``, whose number the caller knows (see ``number``)."""
        line = self.cut.get(start)
        if line is None:
            data = self._data
            end = data.find(b"\n", start)
            raw = data[start : len(data) if end < 0 else end]
            text = raw.decode("utf-8", "replace").rstrip("\r")
            line = LogLine(self._chunk.path, self._chunk.offset + start, text, number)
            self.cut[start] = line
        return line


def parsed_at(data: bytes, start: int, end: int, memo: dict[int, Parsed]) -> Parsed:
    """The fields of the line ``data[start:end]``, parsed once per chunk: ``memo`` holds the
    chunk's lines parsed already, by their start (the engine shares one between its rules'
    level checks, the code lines and the unrecognised pass)."""
    p = memo.get(start)
    if p is None:
        p = memo[start] = parse(data[start:end])
    return p


__all__ = ["Lines", "parsed_at"]
