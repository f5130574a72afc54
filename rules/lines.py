"""Line numbers of evidence, counted incrementally: the cost stays linear in bytes however
many lines of a chunk are evidence (a crash-looping server's log is half failures)."""

from __future__ import annotations

from ascend_doctor.core.events import LogChunk


class LineNumbers:
    """Line numbers of offsets in one chunk, counted from the offset asked before.

    The engine asks in file order within each pass (rules, codes, error units), so the
    newlines of a chunk are counted a few times in all, however many lines are evidence;
    a step back counts the short way (back from the last offset, or from the start)."""

    __slots__ = ("_data", "_first", "_line", "_pos")

    def __init__(self, chunk: LogChunk) -> None:
        self._data = chunk.data
        self._first = chunk.first_line
        self._pos = 0
        self._line = chunk.first_line

    def of(self, offset: int) -> int:
        """The 1-based number of the line holding ``offset``; 0 when the chunk's is unknown."""
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


__all__ = ["LineNumbers"]
