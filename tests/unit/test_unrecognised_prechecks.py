"""The cheap tests the unrecognised pass runs before its patterns (rules/unrecognised.py,
issue 18) never turn away a line the pattern they guard would match: on strings the pattern
itself generates, and on every line (and message) of the development corpus and fixtures."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_doctor.rules import echo as E
from ascend_doctor.rules import parse as P
from ascend_doctor.rules import stated as S
from ascend_doctor.rules import unrecognised as U

ROOT = Path(__file__).parent.parent


@cache
def _lines() -> tuple[bytes, ...]:
    """Every line of the development corpus (never the held-out part) and of the fixtures,
    with its message, the message without its indent, and ``Warning: `` cut off."""
    raw: list[bytes] = []
    for path in sorted((ROOT / "corpus" / "dev").rglob("*")):
        if not path.is_file():
            continue
        if path.suffix == ".jsonl":
            for entry in path.read_text(encoding="utf-8").splitlines():
                raw += json.loads(entry)["text"].encode().split(b"\n")
        else:
            raw += path.read_bytes().split(b"\n")
    for path in sorted((ROOT / "fixtures").rglob("*")):
        if path.is_file():
            raw += path.read_bytes().split(b"\n")
    out: set[bytes] = set()
    for line in raw:
        msg = line[P.parse(line).message :]
        out.update((line, msg, msg.lstrip(), msg.lstrip(b" \t|"), msg[len(b"Warning: ") :]))
    return tuple(sorted(out))


GUARDS: list[tuple[str, re.Pattern[bytes], Callable[[bytes], bool]]] = [
    ("FATAL", P.FATAL, S.may_be_fatal),
    ("STATED_ERROR", S.STATED_ERROR, S.may_state_error),
    ("REQUEST_LOG", P.REQUEST_LOG, lambda m: m.startswith((b"Re", b"Ge"))),
    # error_units tries TRACEBACK only on the lines _traceback_lines found
    ("TRACEBACK", P.TRACEBACK, lambda m: b"Traceback" in m),
    (
        "MODULE_EXCEPTION",
        P.MODULE_EXCEPTION,
        lambda m: (
            b".exc." in m or b".errors." in m or b".exceptions." in m or b"pkg_resources." in m
        ),
    ),
]


def test_the_corpus_has_lines_each_pattern_matches() -> None:
    lines = _lines()
    assert len(lines) > 5000
    for name, pattern, _ in GUARDS:
        assert any(pattern.match(line) for line in lines), name


@pytest.mark.parametrize(("name", "pattern", "guard"), GUARDS, ids=[g[0] for g in GUARDS])
def test_no_corpus_line_a_pattern_matches_is_turned_away(
    name: str, pattern: re.Pattern[bytes], guard: Callable[[bytes], bool]
) -> None:
    missed = [line for line in _lines() if pattern.match(line) and not guard(line)]
    assert missed == [], name


def _generated(pattern: re.Pattern[bytes]) -> st.SearchStrategy[bytes]:
    """Strings that match ``pattern`` from their start: whole matches, and matches with
    any text after them."""
    return st.one_of(
        st.from_regex(pattern, fullmatch=True),
        st.tuples(st.from_regex(pattern, fullmatch=True), st.binary(max_size=40)).map(
            lambda t: t[0] + t[1]
        ),
        st.from_regex(pattern),
    )


@pytest.mark.parametrize(("name", "pattern", "guard"), GUARDS, ids=[g[0] for g in GUARDS])
def test_no_generated_match_is_turned_away(
    name: str, pattern: re.Pattern[bytes], guard: Callable[[bytes], bool]
) -> None:
    @settings(max_examples=1500, deadline=None)
    @given(_generated(pattern))
    def check(text: bytes) -> None:
        if pattern.match(text):
            assert guard(text), (name, text)

    check()


def test_the_module_exception_words_are_the_ones_tested() -> None:
    assert P.MODULE_EXCEPTION_WORDS == (b".exc.", b".errors.", b".exceptions.", b"pkg_resources.")


def _either(text: bytes) -> bool:
    return P.EXCEPTION.match(text) is not None or P.MODULE_EXCEPTION.match(text) is not None


def test_one_exception_pattern_reads_every_corpus_line_as_the_two() -> None:
    lines = _lines()
    assert [U._exception_line(m) for m in lines] == [_either(m) for m in lines]
    assert any(P.MODULE_EXCEPTION.match(m) for m in lines)


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(_generated(P.EXCEPTION), _generated(P.MODULE_EXCEPTION), _generated(P.EXCEPTION_LINE))
)
def test_one_exception_pattern_matches_as_the_two(text: bytes) -> None:
    assert U._exception_line(text) == _either(text)


@pytest.mark.parametrize(
    ("pattern", "guard"),
    [
        (E.ECHO_LOGGERS, lambda s: "dump_input.py:" in s),
        (U.REQUEST_LOGGERS, lambda s: "serving" in s or "protocol.py:" in s),
    ],
    ids=["ECHO_LOGGERS", "REQUEST_LOGGERS"],
)
def test_no_logger_a_pattern_finds_is_turned_away(
    pattern: re.Pattern[str], guard: Callable[[str], bool]
) -> None:
    @settings(max_examples=800, deadline=None)
    @given(st.from_regex(pattern))
    def check(text: str) -> None:
        if pattern.search(text):
            assert guard(text), text

    check()
    loggers = {P.parse(line).logger for line in _lines()}
    assert [s for s in loggers if pattern.search(s) and not guard(s)] == []


def _harmless_before(msg: bytes) -> bool:
    """``_harmless`` as it was: two lowerings, words tested by generators."""
    if S.ignorable(msg):
        return True
    low = msg[:2000].lower()
    return (
        any(word in low for word in S._FALLBACK_WORDS)
        and S.FALLBACK.search(msg, 0, 2000) is not None
    )


PHRASES = [b"Ignore", b"harmless", b"NOT AFFECT the result", b" falling back", b"instead"]
PHRASES += [b"use the default instead", b"retrying", b"Skipped", b"disabled", b"\n", b" ", b"x"]


def test_harmless_reads_every_corpus_line_as_before() -> None:
    lines = _lines()
    assert [S.harmless(m) for m in lines] == [_harmless_before(m) for m in lines]
    assert any(S.harmless(m) for m in lines)


@settings(max_examples=800, deadline=None)
@given(
    st.lists(
        st.sampled_from(PHRASES),
        max_size=6,
    ),
    st.integers(0, 2100),
)
def test_harmless_as_before_on_phrases(parts: list[bytes], pad: int) -> None:
    msg = b"a" * pad + b" ".join(parts)
    assert S.harmless(msg) == _harmless_before(msg)


def _holds_traceback_before(data: bytes, start: int) -> bool:
    end = data.find(b"\n", start)
    return data.find(b"Traceback", start, len(data) if end < 0 else end) >= 0


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([b"Traceback", b"Trace", b"back", b"\n", b"x ", b""]), max_size=12))
def test_traceback_lines_are_the_lines_holding_one(parts: list[bytes]) -> None:
    data = b"".join(parts)
    starts = [0] + [i + 1 for i, c in enumerate(data) if c == 0x0A]
    holders = U._traceback_lines(data)
    assert {s for s in starts if _holds_traceback_before(data, s)} == holders


def test_tracebacks_are_found_alike_line_by_line_and_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # error_units searches each candidate line for a traceback header where candidates are
    # few (a benign chunk) and the whole chunk in one pass where they are many: the same units
    texts = [
        entry["text"].encode() + b"\n"
        for name in ("failures.jsonl", "benign.jsonl")
        for entry in map(
            json.loads, (ROOT / "corpus" / "dev" / name).read_text("utf-8").splitlines()
        )
    ]
    texts += [p.read_bytes() for p in sorted((ROOT / "fixtures").rglob("*.log"))]
    texts += [
        p.read_bytes() for p in sorted((ROOT / "corpus" / "dev" / "incidents").rglob("*.txt"))
    ]
    units = {}
    for per_line in (0, 1 << 40):
        monkeypatch.setattr(U, "PER_LINE", per_line)
        units[per_line] = [U.error_units(t) for t in texts]
    assert units[0] == units[1 << 40]
    assert sum(u.first != u.last for us in units[0] for u in us) > 20  # tracebacks among them
