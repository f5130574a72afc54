"""The development corpus (tests/corpus/dev): rules were written from it, so this pins it.

Held-out figures come from bench/accuracy.py; these lines are examples, not evidence of recall.
"""

import json
from pathlib import Path

import pytest

from ascend_doctor.core.events import LogChunk, Severity
from ascend_doctor.rules import Engine, load_rules

DEV = Path(__file__).parents[1] / "corpus" / "dev"
ENGINE = Engine(load_rules(), clock=lambda: 0.0)
FAILURES = [json.loads(line) for line in (DEV / "failures.jsonl").read_text().splitlines()]
BENIGN = [json.loads(line) for line in (DEV / "benign.jsonl").read_text().splitlines()]
PREFIXES = [
    "",
    "(EngineCore_DP0 pid=276) ERROR 09-08 02:55:31 [core.py:702] ",
    "[rank0]: ",
    "(Worker_DP0_TP1_EP1 pid=1210) ",
    "2026-01-02T03:04:05.123456789Z stderr F ",
]


def categories(text: str) -> set[str]:
    chunk = LogChunk("x.log", "server", 0, (text + "\n").encode(), first_line=1)
    return {f.category.value for f in ENGINE.scan(chunk)}


@pytest.mark.parametrize("prefix", PREFIXES)
def test_dev_failures_get_their_category(prefix: str) -> None:
    missed = [
        r["id"]
        for r in FAILURES
        if r["category"] not in categories("\n".join(prefix + t for t in r["text"].split("\n")))
    ]
    assert len(missed) <= len(FAILURES) * 0.03, missed


def test_dev_benign_lines_never_alarm() -> None:
    alarms = []
    for r in BENIGN:
        chunk = LogChunk("x.log", "server", 0, (r["text"] + "\n").encode())
        if any(f.severity >= Severity.WARNING for f in ENGINE.scan(chunk)):
            alarms.append(r["id"])
    assert alarms == []


def test_line_numbers_stay_exact_when_every_other_line_fails() -> None:
    fail = "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB"
    lines = [fail if i % 2 else f"INFO 01-01 00:00:00 [x.py:1] ok {i}" for i in range(4000)]
    data = ("\n".join(lines) + "\n").encode()
    found = Engine(load_rules(), clock=lambda: 0.0).scan(
        LogChunk("x.log", "server", 0, data, first_line=7)
    )
    assert len(found) == 2000
    for f in found:
        for e in f.evidence:
            assert e.line == 7 + data.count(b"\n", 0, e.offset)
