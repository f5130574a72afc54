"""bench/accuracy.py on a tiny synthetic corpus: forms, separate scoring, false alarms, incidents.

The engines here are small fakes with the scanner's interface, so the figures do not depend on
the rule packs (those are measured by running the benchmark, not asserted by tests).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ascend_doctor.core.events import Category, Finding, LogChunk, Role, Severity

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture()
def scorer(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCH))
    import accuracy  # the benchmark script itself

    return accuracy


@pytest.fixture()
def corpus(scorer: Any) -> Any:
    return sys.modules["corpus"]


def _finding(category: Category, severity: Severity = Severity.ERROR) -> Finding:
    return Finding(
        rule="fake",
        category=category,
        severity=severity,
        role=Role.ROOT,
        subject="server",
        summary="fake",
        at=0.0,
    )


class FakeEngine:
    """Finds a category on lines that *start* with a keyword (so prefixes matter), and like a
    template-learning engine, reports a given line only the first time it sees it."""

    RULES: ClassVar[list[tuple[re.Pattern[bytes], Category, Severity]]] = [
        (re.compile(rb"^BOOM"), Category.NPU_OOM, Severity.CRITICAL),
        (re.compile(rb"MYSTERY"), Category.UNRECOGNISED, Severity.WARNING),
        (re.compile(rb"NOTICE"), Category.ENGINE_DEAD, Severity.INFO),
        (re.compile(rb"ALARM"), Category.DEVICE_FAULT, Severity.WARNING),
    ]

    def __init__(self, log: list[LogChunk]) -> None:
        self.seen: set[bytes] = set()
        self.log = log

    def scan(self, chunk: LogChunk) -> list[Finding]:
        self.log.append(chunk)
        found = []
        for line in chunk.data.splitlines():
            if line in self.seen:
                continue
            self.seen.add(line)
            for pattern, category, severity in self.RULES:
                if pattern.search(line):
                    found.append(_finding(category, severity))
        return found


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.mark.parametrize(
    ("posted", "raw"),
    [
        ("(EngineCore_DP0 pid=276) ERROR x", "ERROR x"),
        ("(VllmWorker rank=3 pid=112081) ERROR x", "ERROR x"),
        ("(RayWorkerWrapper pid=4009, ip=10.0.0.1) boom", "boom"),
        ("[rank3]: RuntimeError: y", "RuntimeError: y"),
        (
            "[rank0]:[W610 16:39:20.08 NPUGraph.cpp:223] Warning: z",
            "[W610 16:39:20.08 NPUGraph.cpp:223] Warning: z",
        ),
        ("2026-12-01T10:00:00.123456789Z stderr F (Worker_TP0 pid=1) ERROR q", "ERROR q"),
        (
            "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] v",
            "ERROR 11-18 18:07:28 engine.py:366] v",
        ),
        (
            "| 0     910B3               | OK            |",
            "| 0     910B3               | OK            |",
        ),
        (
            "        TraceBack (most recent call last):",
            "        TraceBack (most recent call last):",
        ),
    ],
)
def test_posted_prefixes_are_stripped_and_nothing_else(corpus: Any, posted: str, raw: str) -> None:
    assert corpus.strip_prefixes(posted) == raw


def test_each_form_puts_its_prefix_on_every_line_of_a_block(corpus: Any) -> None:
    block = "[rank1]: EI0006: socket timeout\n[rank1]:         Solution: check the ranks"
    assert (
        corpus.in_form(block, "raw") == "EI0006: socket timeout\n        Solution: check the ranks"
    )
    assert corpus.in_form(block, "vllm").split("\n") == [
        "(Worker_TP0 pid=1234) EI0006: socket timeout",
        "(Worker_TP0 pid=1234)         Solution: check the ranks",
    ]
    assert corpus.in_form(block, "kubelet").startswith(
        "2026-12-01T10:00:00.123456789Z stderr F EI0006"
    )
    assert (
        corpus.in_form(block, "rank").split("\n")[1] == "[rank0]:         Solution: check the ranks"
    )


def test_every_entry_is_scored_alone_with_a_fresh_engine(tmp_path: Path, scorer: Any) -> None:
    part = tmp_path / "heldout"
    # the same failure twice: an engine shared between entries would report it only once
    _write(
        part / "failures.jsonl",
        [
            {"id": "h-1", "text": "BOOM out of memory", "category": "npu_oom", "source": "u"},
            {"id": "h-2", "text": "BOOM out of memory", "category": "npu_oom", "source": "u"},
            {"id": "h-3", "text": "MYSTERY failure", "category": "npu_oom", "source": "u"},
            {"id": "h-4", "text": "MYSTERY failure", "category": "unrecognised", "source": "u"},
            {"id": "h-5", "text": "NOTICE only", "category": "engine_dead", "source": "u"},
        ],
    )
    chunks: list[LogChunk] = []
    result = scorer.score_part(part, lambda: FakeEngine(chunks), diagnose=lambda i: {})
    raw = result["forms"]["raw"]
    # h-1, h-2 right; h-3 seen only as unrecognised (not right); h-4 right; h-5 info: unseen
    assert (raw["right"], raw["any"]) == (3, 4)
    # the keyword must start the line, so only the raw form finds the BOOM entries
    assert result["forms"]["vllm"]["right"] == 1
    assert result["categories"]["npu_oom"]["raw_right"] == 2
    # each scan saw exactly one entry's text, as a server log file
    assert len(chunks) == 5 * len(scorer.FORMS)
    assert {c.source for c in chunks} == {"server"}
    assert all(c.data.count(b"\n") == 1 for c in chunks)


def test_false_alarms_count_warning_and_above_only(tmp_path: Path, scorer: Any) -> None:
    part = tmp_path / "heldout"
    _write(
        part / "benign.jsonl",
        [
            {"id": "b-1", "text": "INFO all good", "source": "u"},
            {"id": "b-2", "text": "INFO NOTICE: info-level finding", "source": "u"},
            {"id": "b-3", "text": "WARNING ALARM trap", "source": "u"},
            {"id": "b-4", "text": "MYSTERY but benign", "source": "u"},
        ],
    )
    result = scorer.score_part(part, lambda: FakeEngine([]), diagnose=lambda i: {})
    assert result["forms"]["raw"]["false_alarms"] == 2
    alarms = {m["id"] for m in result["misses"]["raw"]["false_alarms"]}
    assert alarms == {"b-3", "b-4"}


def test_source_kind_picks_the_stream_the_line_is_scanned_as(tmp_path: Path, scorer: Any) -> None:
    part = tmp_path / "heldout"
    _write(
        part / "failures.jsonl",
        [
            {
                "id": "h-1",
                "text": "Out of memory: Killed process 1",
                "category": "host_oom",
                "source": "u",
                "source_kind": "host",
            }
        ],
    )
    chunks: list[LogChunk] = []
    scorer.score_part(part, lambda: FakeEngine(chunks), diagnose=lambda i: {})
    assert {c.source for c in chunks} == {"host"}


def test_incident_root_cause_first_and_its_evidence(tmp_path: Path, scorer: Any) -> None:
    inc = tmp_path / "heldout" / "incidents" / "oom"
    inc.mkdir(parents=True)
    (inc / "log.txt").write_text("EngineDeadError\nNPU out of memory. Tried to allocate 2 GiB\n")
    (inc / "meta.yaml").write_text(
        "root_cause_category: npu_oom\nroot_cause_text: NPU out of memory\nsource: u\n"
    )
    good = {
        "root_causes": [{"category": "npu_oom", "evidence": [{"text": "NPU out of memory. x"}]}]
    }
    wrong = {"root_causes": [{"category": "engine_dead", "evidence": []}, good["root_causes"][0]]}
    [ok] = scorer.score_part(tmp_path / "heldout", lambda: FakeEngine([]), lambda i: good)[
        "incident_results"
    ]
    [bad] = scorer.score_part(tmp_path / "heldout", lambda: FakeEngine([]), lambda i: wrong)[
        "incident_results"
    ]
    assert (ok["root_cause_first"], ok["evidence_has_text"]) == (True, True)
    assert (bad["root_cause_first"], bad["first"]) == (False, "engine_dead")


def test_bad_entries_stop_with_file_and_line(tmp_path: Path, corpus: Any) -> None:
    path = tmp_path / "failures.jsonl"
    _write(path, [{"id": "h-1", "text": "x", "category": "npu_oom", "source": "u"}])
    with path.open("a") as f:
        f.write(json.dumps({"id": "h-2", "text": "y", "category": "oops", "source": "u"}) + "\n")
    with pytest.raises(corpus.CorpusError, match=r"failures\.jsonl:2: 'category' is 'oops'"):
        corpus.load_entries(path, "", failures=True)


def test_missing_dev_part_is_reported_and_held_out_misses_warn(
    tmp_path: Path, scorer: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(
        tmp_path / "heldout" / "benign.jsonl",
        [{"id": "b-1", "text": "INFO 09-08 02:55:20 [worker.py:240] fine", "source": "u"}],
    )
    assert scorer.main(["--corpus", str(tmp_path), "--show-misses"]) == 0
    out, err = capsys.readouterr()
    assert "dev" in out and "missing or empty" in out
    assert "never write or tune a rule" in err
    assert scorer.main(["--corpus", str(tmp_path), "--json", "--part", "dev"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["parts"]["dev"]["failures"] == 0
