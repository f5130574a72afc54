"""Docker json-file logs (rules/container.py): read as the lines their records hold.

The records are written as Docker's json-file driver writes them
(https://docs.docker.com/engine/logging/drivers/json-file/: ``{"log":"...\\n","stream":
"stdout","time":"2019-01-01T11:11:11.111111111Z"}``, Go's encoder escaping ``<``, ``>`` and
``&`` as ``\\u003c`` ...); the lines in them are the development corpus's real lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_doctor.core.events import LogChunk, Severity
from ascend_doctor.rules import Engine, RuleSet, load_rules
from ascend_doctor.rules.container import _parsed, _record, decoded

ROOT = Path(__file__).resolve().parents[2]
DEV = ROOT / "tests" / "corpus" / "dev"
TIME = "2026-12-01T10:00:00.123456789Z"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def _engine(rules: RuleSet, **kw: int) -> Engine:
    return Engine(rules, clock=lambda: 0.0, context_before=kw.get("before", 0), context_after=0)


def record(text: str, stream: str = "stderr", time: str = TIME, whole: bool = True) -> str:
    """One json-file record as moby writes it (HTML characters escaped, as Go does)."""
    body = json.dumps(text + ("\n" if whole else ""), ensure_ascii=False)
    body = body.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'{{"log":{body},"stream":"{stream}","time":"{time}"}}'


def _server_lines(name: str) -> list[dict[str, str]]:
    rows = [json.loads(r) for r in (DEV / name).read_text(encoding="utf-8").splitlines()]
    return [r for r in rows if r.get("source_kind", "server") == "server"]


def _categories(rules: RuleSet, data: bytes) -> set[str]:
    found = _engine(rules).scan(LogChunk("c.log", "server", 0, data, first_line=1))
    return {f.category.value for f in found if f.severity >= Severity.WARNING}


def test_every_development_line_means_the_same_in_a_json_file_log(rules: RuleSet) -> None:
    """Each real failure line (or block, one record per line) is recognised in a json-file
    log as in the CRI form the kubelet writes for the same output, and no benign line
    raises anything there."""
    failures, benign = _server_lines("failures.jsonl"), _server_lines("benign.jsonl")
    assert len(failures) > 250 and len(benign) > 150
    differ = []
    for entry in failures:
        lines = entry["text"].split("\n")
        docker = "".join(record(line) + "\n" for line in lines).encode()
        cri = "".join(f"{TIME} stderr F {line}\n" for line in lines).encode()
        got, want = _categories(rules, docker), _categories(rules, cri)
        if got != want or entry["category"] not in got:
            differ.append((entry["id"], entry["category"], sorted(got), sorted(want)))
    assert differ == []
    alarms = [
        e["id"]
        for e in benign
        if _categories(rules, "".join(record(ln) + "\n" for ln in e["text"].split("\n")).encode())
    ]
    assert alarms == []


def _starts(data: bytes) -> list[int]:
    """Where each line of ``data`` starts."""
    return [0, *[i + 1 for i, b in enumerate(data) if b == 0x0A][:-1]]


def _file(lines: list[str]) -> bytes:
    return "".join(
        record(line, time=f"2026-12-01T10:00:{i % 60:02d}.5Z") + "\n"
        for i, line in enumerate(lines)
    ).encode()


LINES = [
    "INFO 06-03 14:54:20 [api_server.py:1000] Starting vLLM API server on http://0.0.0.0:8000",
    "ERROR 06-03 14:54:23 [core.py:400] RuntimeError: NPU out of memory. Tried to allocate 2.00 "
    "GiB (NPU 0; 60.97 GiB total capacity; 58.20 GiB already allocated)",
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.11/site-packages/vllm_ascend/platform.py", line 3, in <module>',
    "    import torch_npu",
    "ModuleNotFoundError: No module named 'torch_npu'",
    "INFO 06-03 14:54:30 [logger.py:41] Received request cmpl-1: prompt: 'say <ERROR> & "
    "NPU out of memory'",
]


def test_offsets_and_line_numbers_are_the_files(rules: RuleSet) -> None:
    """Findings and evidence name the record's byte offset and line number in the file,
    and each line's text is the output line, unescaped."""
    data = _file(LINES)
    starts = _starts(data)
    found = _engine(rules, before=1).scan(LogChunk("c.log", "server", 0, data, first_line=1))
    assert [(f.category.value, f.offset) for f in found] == [
        ("npu_oom", starts[1]),
        ("env_mismatch", starts[5]),
    ]
    oom = found[0]
    assert [(e.offset, e.line) for e in oom.evidence] == [(starts[1], 2), (starts[0], 1)]
    assert oom.evidence[0].text == "2026-12-01T10:00:01.5Z stderr F " + LINES[1]


def test_a_file_read_in_other_chunks_names_every_line_by_the_same_offset(
    rules: RuleSet,
) -> None:
    """A doctor that reads the file again from a checkpoint (another cut) names each
    finding by the same (file, offset): that is how repeats are dropped."""
    data = _file(LINES * 5)
    whole = _engine(rules).scan(LogChunk("c.log", "server", 0, data, first_line=1))
    assert len(whole) == 10
    cuts = [i + 1 for i, b in enumerate(data) if b == 0x0A][:-1]
    for cut in cuts[::3]:
        engine = _engine(rules)
        first = data[:cut].count(b"\n") + 1
        parts = [
            LogChunk("c.log", "server", 0, data[:cut], first_line=1),
            LogChunk("c.log", "server", cut, data[cut:], first_line=first),
        ]
        got = [f for part in parts for f in engine.scan(part)]
        assert [(f.rule, f.offset, f.evidence[0].line) for f in got] == [
            (f.rule, f.offset, f.evidence[0].line) for f in whole
        ]


def test_a_record_is_unescaped_and_a_line_that_is_none_is_read_as_it_is() -> None:
    text = 'ERROR x "quoted" <tag> & \t tab \x1b[31mred\x1b[0m 中文'
    lines = [
        record(text),
        record("a part of a longer line", stream="stdout", whole=False),
        '{"log":"cut in the midd',  # a record cut (a full disk): not JSON
        "plain text, not a record",
        '{"log":"x\\n","stream":"stdout"}',  # no time: the text alone
    ]
    data = ("\n".join(lines) + "\n").encode()
    chunk = LogChunk("c.log", "server", 7, data, first_line=3, lines=5)
    got = decoded(chunk)
    assert got is not None
    assert got.chunk.data.decode().split("\n") == [
        f"{TIME} stderr F {text}",
        f"{TIME} stdout P a part of a longer line",
        lines[2],
        lines[3],
        "x",
        "",
    ]
    assert (got.chunk.offset, got.chunk.first_line, got.chunk.lines) == (7, 3, 5)
    raw = _starts(data)
    new = _starts(got.chunk.data)
    assert [got.starts[n] for n in new] == raw


def test_any_other_chunk_is_not_touched() -> None:
    for data in (b"INFO plain\n", b' {"log":"x\\n"}\n', b'{"level":"error","msg":"x"}\n'):
        assert decoded(LogChunk("c.log", "server", 0, data)) is None


def test_a_plain_record_is_read_as_the_json_parser_reads_it() -> None:
    """Records without escapes skip the JSON parser: the same line either way."""
    texts = [line for e in _server_lines("failures.jsonl") for line in e["text"].split("\n")]
    texts += ["", "x", "ends in a blank ", "中文 text"]
    seen = 0
    for text in texts:
        for whole in (True, False):
            for stream in ("stdout", "stderr"):
                line = record(text, stream=stream, whole=whole).encode()
                assert _record(line) == _parsed(line), line
                seen += b"\\" not in line[8:-60]
    assert seen > 300  # most took the plain path
