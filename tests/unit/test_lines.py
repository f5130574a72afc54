"""Evidence line numbers (rules/lines.py) are the count of newlines before a line, whatever
order the engine asks them in and whether or not the reader counted the chunk's lines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_doctor.core.events import LogChunk
from ascend_doctor.rules.lines import Lines, newline_marks


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=40000), min_size=1, max_size=60),
    asks=st.lists(st.integers(min_value=0, max_value=10**9), max_size=80),
    first=st.integers(min_value=1, max_value=10**6),
    counted=st.sampled_from(["no", "total", "marks"]),
)
def test_numbers_are_newlines_before(
    lengths: list[int], asks: list[int], first: int, counted: str
) -> None:
    data = b"".join(b"x" * n + b"\n" for n in lengths)
    counts = len(lengths) if counted != "no" else -1
    chunk = LogChunk("f", "server", 0, data, first_line=first, lines=counts)
    lines = Lines(chunk, newline_marks(data) if counted == "marks" else None)
    for ask in asks:
        offset = ask % len(data)
        assert lines.number(offset) == first + data.count(b"\n", 0, offset)
    assert lines.total() == len(lengths)


def test_unknown_first_line_numbers_nothing() -> None:
    lines = Lines(LogChunk("f", "server", 0, b"a\nb\n"))
    assert lines.number(2) == 0
    assert lines.total() == 2
