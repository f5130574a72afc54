"""CANN blocks are found by matching each line in place (rules/blocks.py, issue 18): the same
blocks as cutting every line out and matching its body, on the corpus, the fixtures and
generated blocks (a last line without its newline, prefixes, blank lines)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_doctor.rules import blocks as B

ROOT = Path(__file__).parent.parent


def _body(line: bytes) -> bytes:
    return line[B.PREFIX.match(line).end() :]  # type: ignore[union-attr]


def _lines_around_before(data: bytes, start: int) -> tuple[int, int] | None:
    """``_lines_around`` as it was: each line cut out, then its body."""
    end = data.find(b"\n", start)
    end = len(data) if end < 0 else end
    if not B.BODY_LINE.match(_body(data[start:end])):
        return None
    first, n = start, 0
    while not B.CODE_LINE.match(_body(data[first : data.find(b"\n", first)])):
        if first == 0 or n >= B.MAX_BLOCK_LINES:
            return None
        prev = data.rfind(b"\n", 0, first - 1) + 1
        line = data[prev : first - 1]
        if not B.BODY_LINE.match(_body(line)):
            return None
        first, n = prev, n + 1
    last_end = end
    pos = end + 1
    while pos < len(data) and n < B.MAX_BLOCK_LINES:
        nxt = data.find(b"\n", pos)
        nxt = len(data) if nxt < 0 else nxt
        if not B.BODY_LINE.match(_body(data[pos:nxt])):
            break
        last_end, pos, n = nxt, nxt + 1, n + 1
    return first, last_end


def _starts(data: bytes) -> list[int]:
    return [0] + [i + 1 for i, c in enumerate(data) if c == 0x0A and i + 1 < len(data)]


def _same(data: bytes) -> None:
    for start in _starts(data):
        assert B._lines_around(data, start) == _lines_around_before(data, start), (data, start)


@cache
def _texts() -> tuple[bytes, ...]:
    out: list[bytes] = []
    for path in sorted((ROOT / "corpus" / "dev").rglob("*")):
        if path.is_file() and path.suffix == ".jsonl":
            for entry in path.read_text(encoding="utf-8").splitlines():
                out.append(json.loads(entry)["text"].encode())
        elif path.is_file():
            out.append(path.read_bytes())
    for path in sorted((ROOT / "fixtures").rglob("*")):
        if path.is_file():
            out.append(path.read_bytes())
    return tuple(out)


def test_the_same_blocks_in_the_corpus_and_fixtures() -> None:
    found = 0
    for text in _texts():
        for data in (text, text.rstrip(b"\n"), text + b"\n"):
            _same(data)
            found += sum(B._lines_around(data, s) is not None for s in _starts(data))
    assert found > 100


LINES = [
    b"EZ9999: Inner Error!",
    b"EZ9999:",
    b"EE9999[PID: 1210] 2025-01-01-00:00:00.000.000 (EE9999):  x",
    b"[rank0]: EZ9999: [PID: 838] 2025-01-01 x",
    b"(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:1] E39999: Inner Error!",
    b"ERROR 01-02 03:04:05 [core.py:1] Possible Cause: x",
    b"Solution: y",
    b"TraceBack (most recent call last):",
    b"        Init failed[FUNC:Init][FILE:a.cc][LINE:12]",
    b"x [FUNC:F][FILE:f.cc][LINE:3]  ",
    b"x [FUNC:F][FILE:f.cc][LINE:3] y",
    b"(W pid=1) ",
    b"ERROR 01-02 03:04:05 [core.py:1] ",
    b" ",
    b"",
    b"RuntimeError: x",
    b"W12345: warn",
]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=10), st.booleans())
def test_the_same_blocks_in_generated_text(lines: list[bytes], newline: bool) -> None:
    _same(b"\n".join(lines) + (b"\n" if newline else b""))


def test_a_last_line_is_read_without_its_last_byte_as_before() -> None:
    """The walk back cut a last line without a newline one byte short: still so."""
    data = b"x\n  inner[FUNC:F][FILE:f.cc][LINE:3]\nEZ9999:"
    assert B._lines_around(data, len(data) - 7) is None
    assert B._lines_around(data + b"\n", len(data) - 7) is not None
