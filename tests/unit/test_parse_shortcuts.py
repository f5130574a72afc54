"""parse()'s shortcuts (rules/parse.py, issue 18) read every line as the patterns do: the test
before ``_OUTER`` skips only where it matches nothing, logfmt's header is tried only on a
line holding ``level=``, and a line without a header gets the same fields."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_doctor.rules import parse as P

ROOT = Path(__file__).parent.parent
FRAGMENTS = [
    "Aug  1 08:38:31 host kernel: ",
    "2026-08-01T08:38:31.123456+08:00 host vllm[1234]: ",
    "[ 1197.584409] ",
    "2026-01-02T03:04:05.6Z stdout F ",
    "2026-01-02T03:04:05.6Z ",
    "[pod/vllm-0/vllm] ",
    "vllm-server-1  | ",
    "[RAW SERVER] (",
    "\x1b[36m",
    "(EngineCore_DP0 pid=276) ",
    "(pid=1, ip=10.0.0.5) ",
    "[rank0]: ",
    "ERROR 09-08 02:55:31 [core.py:702] ",
    "[E324 13:00:25.4 compiler_depend.ts:574] ",
    'ts=1 level="error" ',
    "level=warn ",
    "Traceback (most recent call last):",
    "RuntimeError: x",
    "Abc ",
    " | ",
    " ",
    "x",
]


@cache
def _lines() -> tuple[bytes, ...]:
    out: set[bytes] = set()
    for path in sorted((ROOT / "corpus" / "dev").rglob("*")):
        if path.is_file() and path.suffix == ".jsonl":
            for entry in path.read_text(encoding="utf-8").splitlines():
                out.update(json.loads(entry)["text"].encode().split(b"\n"))
        elif path.is_file():
            out.update(path.read_bytes().split(b"\n"))
    for path in sorted((ROOT / "fixtures").rglob("*")):
        if path.is_file():
            out.update(path.read_bytes().split(b"\n"))
    return tuple(sorted(out))


def _outer_before(line: bytes, pos: int) -> int:
    m = P._OUTER.match(line, pos)
    return m.end() if m else pos


def _parse_before(line: bytes) -> P.Parsed:
    """``_parse`` as it was: ``_OUTER`` matched everywhere, every header of the byte tried."""
    pos = _outer_before(line, 0)
    if pos >= len(line):
        return P.Parsed("", "", pos)
    for name, header in P._HEADERS_BY_BYTE[line[pos]]:
        h = header.match(line, pos)
        if h is None:
            continue
        groups = h.groupdict()
        raw = groups.get("level") or b""
        level = P._LEVELS.get(raw.upper()) or raw.decode().upper()
        end = _outer_before(line, h.end())
        logger = (groups.get("logger") or b"").decode("utf-8", "replace")
        module = (groups.get("module") or b"").decode() if name == "plog" else ""
        return P.Parsed(name, level, end, logger, module)
    return P.Parsed("", "", pos)


def test_every_corpus_line_is_read_as_before() -> None:
    lines = _lines()
    assert len(lines) > 1500
    assert [P._parse(line) for line in lines] == [_parse_before(line) for line in lines]
    assert [P.parse(line) for line in lines] == [
        P._parse_coloured(line) if b"\x1b[" in line else _parse_before(line) for line in lines
    ]


def test_the_outer_prefixes_end_where_the_pattern_ends_at_every_offset() -> None:
    for line in _lines():
        for pos in range(min(len(line), 200) + 1):
            assert P._outer_end(line, pos) == _outer_before(line, pos), (line, pos)


@settings(max_examples=1500, deadline=None)
@given(st.from_regex(P._OUTER), st.binary(max_size=12))
def test_the_outer_prefixes_of_generated_prefixes(text: bytes, tail: bytes) -> None:
    for line in (text, text + tail):
        assert P._outer_end(line, 0) == _outer_before(line, 0), line
    line = tail + text
    assert P._outer_end(line, len(tail)) == _outer_before(line, len(tail)), line


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=6), st.binary(max_size=8))
def test_mixed_prefixes_and_headers_are_read_as_before(parts: list[str], tail: bytes) -> None:
    line = "".join(parts).encode() + tail.replace(b"\n", b"")
    assert P._parse(line) == _parse_before(line)
    for pos in range(len(line) + 1):
        assert P._outer_end(line, pos) == _outer_before(line, pos)


@settings(max_examples=800, deadline=None)
@given(st.from_regex(P._LOGFMT), st.binary(max_size=8))
def test_no_line_logfmt_reads_lacks_its_literal(text: bytes, tail: bytes) -> None:
    for line in (text, tail + text):
        for pos in range(len(line) + 1):
            if P._LOGFMT.match(line, pos):
                assert b"level=" in line
    assert P._parse(text) == _parse_before(text)


def test_lines_without_a_header_share_their_fields() -> None:
    a, b = P.parse(b"RuntimeError: x"), P.parse(b"KeyError: y")
    assert a == b == P.Parsed("", "", 0)
    assert a is b  # one immutable Parsed per message offset


def test_the_longest_compose_column_is_read() -> None:
    """A compose column's `` | `` may end 122 bytes after its name starts."""
    for name in (1, 2, 60, 99, 100, 101):
        for spaces in (1, 2, 19, 20, 21):
            column = b"s" * name + b" " * spaces + b"| "
            for head in (b"", b"ERROR 09-08 02:55:31 [core.py:702] ", b"xy"):
                line = head + column + b"msg"
                for pos in (0, len(head)):
                    assert P._outer_end(line, pos) == _outer_before(line, pos), (name, spaces)
                assert P._parse(line) == _parse_before(line)
    assert P._outer_end(b"s" * 100 + b" " * 20 + b"| m", 0) == 122


@settings(max_examples=300, deadline=None)
@given(st.from_regex(rb"[A-Z]{4,8}", fullmatch=True))
def test_any_level_word_reads_as_before_when_levels_are_remembered(word: bytes) -> None:
    """Levels are remembered by their field (at most 64): loguru's may be any capitals."""
    for line in (
        b"2025-06-01 10:00:00.123 | " + word + b"    | m:f:12 - msg",
        b"[2025-06-01 10:00:00] [" + word + b"] msg",
        word + b" 12-01 00:00:00 [a.py:1] msg",
    ):
        assert P._parse(line) == _parse_before(line)
    assert len(P._LEVEL_OF) <= 64
