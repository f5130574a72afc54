"""parse() tries only the headers that can start with a line's first byte (rules/parse.py):
it reads every line as trying all of them in order does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_doctor.rules import parse as P

ROOT = Path(__file__).parent.parent
FRAGMENTS = [
    "ERROR 09-08 02:55:31 [core.py:702] ",
    "[E324 13:00:25.4 compiler_depend.ts:574] ",
    "[ERROR] RUNTIME(4242,python3):2026-01-02-03:04:05.123 [stream.cc:1044] ",
    "[ERROR] 2025-06-03-14:54:23 (PID:8648, Device:0, RankID:-1) ",
    "2025-03-26 11:48:53 - INFO - vllm.x - ",
    "E1210 03:24:54.778028 2548307 file.cpp:820] ",
    "ERROR:    ",
    "ERROR:torch.distributed:",
    "2025-06-01 10:00:00.123 | ERROR    | m:f:12 - ",
    "[2025-06-01 10:00:00] [1234] [ERROR] ",
    'ts=1 level="error" ',
    "[rank0]: ",
    "(EngineCore_DP0 pid=276) ",
    "RuntimeError: x",
    " ",
    "\t",
    "Traceback (most recent call last):",
]


def _all_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(P, "_HEADERS_BY_BYTE", [P._HEADERS] * 256)


def _lines() -> list[bytes]:
    out = []
    for name in ("failures.jsonl", "benign.jsonl"):
        for raw in (ROOT / "corpus" / "dev" / name).read_text(encoding="utf-8").splitlines():
            out += json.loads(raw)["text"].encode().split(b"\n")
    for path in sorted((ROOT / "fixtures").rglob("*")):
        if path.is_file():
            out += path.read_bytes().split(b"\n")
    return out


def test_the_same_fields_as_trying_every_header(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines()
    fast = [P.parse(line) for line in lines]
    _all_headers(monkeypatch)
    assert [P.parse(line) for line in lines] == fast
    assert len({p.header for p in fast}) >= 6


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=5), st.binary(max_size=8))
def test_the_same_on_mixed_headers(parts: list[str], tail: bytes) -> None:
    line = "".join(parts).encode() + tail.replace(b"\n", b"")
    fast = P.parse(line)
    with pytest.MonkeyPatch.context() as m:
        _all_headers(m)
        assert P.parse(line) == fast
