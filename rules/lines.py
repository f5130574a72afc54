"""The lines of a chunk as evidence: each cut once, numbered incrementally.

In a failure-dense log (a crash-looping server's is half failures) every line is evidence of
several findings (the match, and context of its neighbours'): a line is cut and decoded once
per chunk, and its number costs at most a few KiB of counting, so the cost stays linear in
bytes whatever the density.
"""

from __future__ import annotations

from ascend_doctor.core.events import LogChunk, LogLine

_STEP = 4096
"""Bytes per step of a chunk's newline index."""


class Lines:
    """Evidence lines of one chunk, numbered from ``chunk.first_line`` (0 when unknown).

    A line's number comes from the line asked before when it is near (the engine asks in
    file order within each pass), else from an index of newlines per ``_STEP`` bytes built
    on first need, in the one walk over the chunk that also counts its lines: each number
    costs at most a step of counting, however many lines are evidence."""

    __slots__ = ("_chunk", "_data", "_first", "_index", "_line", "_pos", "cut")

    def __init__(self, chunk: LogChunk) -> None:
        self._chunk = chunk
        self._data = chunk.data
        self._first = chunk.first_line
        self._pos = 0
        self._line = chunk.first_line
        self._index: list[int] | None = None
        self.cut: dict[int, LogLine] = {}
        """The lines cut so far, by their start."""

    def _steps(self) -> list[int]:
        if self._index is None:
            count, size = self._data.count, len(self._data)
            index, total = [0], 0
            for start in range(0, size, _STEP):
                total += count(b"\n", start, start + _STEP)
                index.append(total)
            self._index = index
        return self._index

    def total(self) -> int:
        """How many newlines the chunk holds."""
        return self._steps()[-1]

    def number(self, offset: int) -> int:
        """The number of the line holding ``offset``; 0 when the chunk's is unknown."""
        if not self._first:
            return 0
        pos = self._pos
        if pos <= offset < pos + _STEP:
            line = self._line + self._data.count(b"\n", pos, offset)
        else:
            step = offset // _STEP
            base = step * _STEP
            line = self._first + self._steps()[step] + self._data.count(b"\n", base, offset)
        self._pos, self._line = offset, line
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


__all__ = ["Lines"]
