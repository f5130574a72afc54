"""Failure-dense logs cost what benign ones cost per byte (issue 18): line numbers counted
once per pass, each evidence line cut once, hyperscan proposing each line once per pattern.
Costs are counted (bytes walked, lines cut), never timed."""

from __future__ import annotations

import json
import re
import re._parser as sre  # type: ignore[import-not-found]
from pathlib import Path

import pytest

from ascend_doctor.core.events import LogChunk
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules import lines as lines_mod
from ascend_doctor.rules.echo import _ECHO_WORDS, is_request_log
from ascend_doctor.rules.matcher import prefix_pattern
from ascend_doctor.rules.parse import REQUEST_LOG

ROOT = Path(__file__).parent.parent
RULES = load_rules()


def _dense(n: int) -> bytes:
    failures = [
        json.loads(x)["text"]
        for x in (ROOT / "corpus" / "dev" / "failures.jsonl").read_text().splitlines()
    ]
    single = [t for t in failures if "\n" not in t]
    out = []
    for i in range(n):
        out.append(
            single[i % len(single)] if i % 2 else f"INFO 09-08 02:55:31 [core.py:1] step {i}"
        )
    return ("\n".join(out) + "\n").encode()


class _Counted(bytes):
    """Chunk bytes that count how many bytes ``count`` walks."""

    walked = 0

    def count(self, sub: bytes, start: int = 0, end: int | None = None) -> int:  # type: ignore[override]
        stop = len(self) if end is None else end
        _Counted.walked += max(0, stop - start)
        return super().count(sub, start, stop)


@pytest.mark.parametrize("matcher", ["re", "hyperscan"])
def test_line_numbers_walk_each_chunk_a_few_times(matcher: str) -> None:
    """Numbering the evidence of thousands of findings walks the chunk a bounded number of
    times (a pass per kind of finding), not once per finding."""
    if matcher == "hyperscan":
        pytest.importorskip("hyperscan")
    data = _dense(4000)
    engine = Engine(RULES, matcher=matcher, clock=lambda: 0.0)
    _Counted.walked = 0
    found = engine.scan(LogChunk("x.log", "server", 0, _Counted(data), first_line=1))
    assert len(found) > 1500
    # the engine's own count of the chunk's lines, then at most a few passes
    assert _Counted.walked <= 6 * len(data)
    lines = data.split(b"\n")
    for f in found:
        for e in f.evidence:
            assert lines[e.line - 1].decode("utf-8", "replace") == e.text
            assert data.count(b"\n", 0, e.offset) + 1 == e.line


def test_each_evidence_line_is_cut_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line that is a finding and context of its neighbours' is decoded once."""
    cut: list[int] = []
    real = lines_mod.Lines.at

    def at(self: lines_mod.Lines, start: int, number: int) -> object:
        if start not in self.cut:
            cut.append(start)
        return real(self, start, number)

    monkeypatch.setattr(lines_mod.Lines, "at", at)
    data = _dense(2000)
    found = Engine(RULES, matcher="re", clock=lambda: 0.0).scan(
        LogChunk("x.log", "server", 0, data, first_line=1)
    )
    evidence = sum(len(f.evidence) for f in found)
    assert evidence > 3 * len(cut)
    assert len(cut) == len(set(cut)) <= data.count(b"\n")


def test_unknown_line_numbers_stay_zero() -> None:
    found = Engine(RULES, matcher="re", clock=lambda: 0.0).scan(
        LogChunk("x.log", "server", 0, _dense(50))
    )
    assert found and {e.line for f in found for e in f.evidence} == {0}


def test_prefix_of_every_rule_matches_every_example() -> None:
    for rule in RULES.text:
        prefix = re.compile(prefix_pattern(rule.pattern).encode())
        for text in rule.examples["match"]:
            line = text.encode()
            if rule.regex.search(line):
                assert prefix.search(line), (rule.id, prefix.pattern)


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        (r"NPU out of memory\.(?P<detail>[^\n]{0,160})", r"NPU out of memory\."),
        (r"device_id=(?P<device>\d+)(?:, (?P<k>\w+))?", "device_id="),
        (r"error(?:: (?P<e>[^\n]{1,200}))?", "error"),
        (r"abc\d+$", r"abc\d+$"),  # an end anchor: hyperscan reads it at the chunk's end
        (r"a|b(?P<x>\d+)", r"a|b(?P<x>\d+)"),  # a top-level alternative
        (r"\d+", r"\d+"),  # nothing of fixed width to keep
        (r"[]x]y*", "[]x]"),
        (r"a{2}b{1,3}", "a{2}"),
        (r"\x41b+", r"\x41b+"),  # an escape read as two items: left whole
    ],
)
def test_prefix_pattern(pattern: str, prefix: str) -> None:
    assert prefix_pattern(pattern) == prefix


def test_echo_words_are_in_every_echo_form() -> None:
    """``is_request_log`` skips lines without an echo's words: every form of REQUEST_LOG
    must start with one (a new form needs its word added)."""
    ((op, value),) = sre.parse(REQUEST_LOG.pattern.decode()).data
    assert str(op) == "BRANCH"  # "(?:A|B|C)": one alternative per form
    _, branches = value
    for branch in branches:
        head = ""
        for item_op, value in branch.data:
            if str(item_op) != "LITERAL":
                break
            head += chr(value)
        assert _ECHO_WORDS.search(head.encode()), head
    assert is_request_log(b"ERROR 11-04 09:45:23 [dump_input.py:79] Dumping scheduler stats: S(")
    assert not is_request_log(b"ERROR 11-04 09:45:23 [core.py:588] EngineCore encountered")
