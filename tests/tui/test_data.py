"""The TUI's data layer without Textual: line index, tail, waterfall rows, pid liveness."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from ascend_doctor.core.procs import pid_alive
from ascend_doctor.core.store import SpanRecord
from ascend_doctor.tui.data import Source, load_incident, load_traces, read_tail
from ascend_doctor.tui.logindex import LineIndex
from ascend_doctor.tui.waterfall_model import waterfall
from tests.conftest import poll


def test_line_index_grows_with_the_file_and_restarts_after_truncation(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("one\ntwo\nthr")
    index = LineIndex(str(log))
    assert index.update() == 2
    assert index.lines(0, 5) == ["one", "two"]
    with log.open("a") as fh:
        fh.write("ee\nfour\n")
    assert index.update() == 2
    assert index.lines(1, 2) == ["two", "three"]
    assert index.search("FOUR", 0) == 3
    assert index.search("one", 3, forward=False) == 0
    assert index.search("five", 0) is None
    log.write_text("new\n")  # truncated: indexed again from the start
    assert index.update() == 1 and index.lines(0, 9) == ["new"]


def test_line_index_bounded_step(tmp_path: Path) -> None:
    log = tmp_path / "b.log"
    log.write_bytes(b"".join(b"line %06d\n" % i for i in range(10_000)))
    index = LineIndex(str(log))
    index.update(max_bytes=5_000)
    assert 0 < len(index) < 10_000
    while index.update(max_bytes=5_000):
        pass
    assert len(index) == 10_000
    assert index.lines(9_999, 1) == ["line 009999"]


def test_read_tail_drops_the_partial_first_and_last_line(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_bytes(b"aaaa\nbbbb\ncccc\ndd")
    first, lines = read_tail(str(log), max_bytes=12)
    assert lines == [(10, "cccc")] and first == 10


def _span(sid: str, parent: str, start: int, end: int) -> SpanRecord:
    return SpanRecord("t", sid, parent, sid, "internal", start, end, "ok", {}, [], {}, "doctor")


def test_waterfall_rows_in_tree_order_with_orphans_as_roots() -> None:
    rows = waterfall(
        [
            _span("verify", "root", 60, 100),
            _span("root", "", 0, 100),
            _span("detect", "root", 0, 10),
            _span("orphan", "gone", 20, 30),
            _span("reset", "remediate", 15, 40),
            _span("remediate", "root", 10, 50),
        ]
    )
    assert [(r.span.span_id, r.depth) for r in rows] == [
        ("root", 0),
        ("detect", 1),
        ("remediate", 1),
        ("reset", 2),
        ("verify", 1),
        ("orphan", 0),
    ]
    verify = rows[4]
    assert (verify.start, verify.width) == (0.6, 0.4)


def test_pid_alive_and_zombies() -> None:
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    poll(
        lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE,
        30,
        "the child to exit",
    )
    assert not pid_alive(child.pid)  # exited, not reaped yet
    child.wait()
    assert not pid_alive(child.pid)


def test_evidence_line_numbers_are_counted_only_when_the_line_still_reads_the_same(
    state: Path,
) -> None:
    detail = load_incident(Source.for_state_dir(state), 1)
    (root,) = detail.roots
    assert [(e.path, e.line) for e in root.evidence] == [("server.log", 3)]
    (state / "server.log").write_text("rotated\n" * 50)
    fresh = load_incident(Source.for_state_dir(state), 1)
    assert [(e.where) for e in fresh.roots[0].evidence] == ["server.log@170"]


def test_incident_traces_are_listed_however_many_server_traces_there_are(state: Path) -> None:
    rows = load_traces(Source.for_state_dir(state), limit=1)
    assert [(r.source, r.incident_id) for r in rows] == [("server", None), ("doctor", 2)]
