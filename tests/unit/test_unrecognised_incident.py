"""An unknown error repeated is one incident with a count, never remediated; an unexplained
exit makes it the crash's incident; the host-OOM plan never adds swap."""

from __future__ import annotations

import signal
from pathlib import Path

from ascend_doctor.core.events import Category, LogChunk, ProcessEvent, ProcessState
from ascend_doctor.rules import Engine
from ascend_doctor.rules.crash import crash_finding
from tests.unit.test_remediation import RULES, World
from tests.unit.test_rules_unrecognised import TRACEBACK


def unknown_errors(count: int) -> list:  # type: ignore[type-arg]
    text = "".join(TRACEBACK.format(s=i % 60, n=i) for i in range(count))
    engine = Engine(RULES, clock=lambda: 1000.0)
    found = engine.scan(LogChunk("server.log", "server", 0, text.encode(), first_line=1))
    return [f for f in found if f.category == Category.UNRECOGNISED]


def test_an_unknown_error_100_times_is_one_incident_of_100_never_due(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    findings = unknown_errors(100)
    assert len(findings) == 100
    assert w.incidents.ingest(findings[:1]) == []
    assert w.incidents.ingest(findings[1:]) == []
    (inc,) = w.store.incidents()
    assert inc.category == Category.UNRECOGNISED and inc.plan == ()
    assert w.store.finding_count(inc.id) == 100
    assert w.store.actions(inc.id) == []


def test_an_unexplained_exit_after_unknown_errors_is_their_crash(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    w.incidents.ingest(unknown_errors(3))
    exit_event = ProcessEvent(
        ProcessState.EXITED, ProcessState.RUNNING, w.now, pid=9, exit_code=-signal.SIGSEGV
    )
    (due,) = w.incidents.ingest([crash_finding(exit_event, ["last words"])])
    (inc,) = w.store.incidents()
    assert due == inc.id and inc.category == Category.SERVER_CRASHED
    assert "SIGSEGV" in inc.summary and w.store.finding_count(inc.id) == 4


async def test_the_host_oom_plan_lowers_host_memory_never_adds_swap(tmp_path: Path) -> None:
    w = World(
        tmp_path,
        (
            "vllm",
            "serve",
            "m",
            "--max-num-seqs",
            "16",
            "--swap-space",
            "8",
            "--max-model-len",
            "8192",
        ),
    )
    rule = "kernel-oom-killed-process"
    (inc_id,) = w.incidents.ingest([w.finding(rule, {"pid": "9", "comm": "python3"}, 10)])
    changes = []
    for offset in (20, 30, 40):
        await w.remediator.remediate(inc_id)
        changes.append({o.key: o.value for o in w.store.overrides()})
        w.now += 10
        w.incidents.note_start(w.now)
        w.now += 10
        w.incidents.ingest([w.finding(rule, {"pid": "9", "comm": "python3"}, offset)])
    assert changes == [
        {"--max-num-seqs": "8"},
        {"--max-num-seqs": "8", "--swap-space": "4"},
        {"--max-num-seqs": "8", "--swap-space": "4", "--max-model-len": "4096"},
    ]
