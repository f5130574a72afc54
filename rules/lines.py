"""The lines of a chunk as evidence: each cut once, numbered incrementally.

In a failure-dense log (a crash-looping server's is half failures) every line is evidence of
several findings (the match, and context of its neighbours'): a line is cut and decoded once
per chunk, and its number is counted from the line asked before, so the cost stays linear in
bytes whatever the density.
"""

from __future__ import annotations

from ascend_doctor.core.events import LogChunk, LogLine


class Lines:
    """Evidence lines of one chunk, numbered from ``chunk.first_line`` (0 when unknown).

    The engine asks in file order within each pass (rules, codes, error units), so newlines
    are counted a few times per chunk in all; a step back counts the short way (back from the
    offset asked before, or from the start)."""

    __slots__ = ("_chunk", "_data", "_first", "_line", "_pos", "cut")

    def __init__(self, chunk: LogChunk) -> None:
        self._chunk = chunk
        self._data = chunk.data
        self._first = chunk.first_line
        self._pos = 0
        self._line = chunk.first_line
        self.cut: dict[int, LogLine] = {}
        """The lines cut so far, by their start."""

    def number(self, offset: int) -> int:
        """The number of the line holding ``offset``; 0 when the chunk's is unknown."""
        if not self._first:
            return 0
        if offset >= self._pos:
            self._line += self._data.count(b"\n", self._pos, offset)
        elif self._pos - offset <= offset:
            self._line -= self._data.count(b"\n", offset, self._pos)
        else:
            self._line = self._first + self._data.count(b"\n", 0, offset)
        self._pos = offset
        return self._line

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
