"""The store: schema upgrades and the listeners told of every change."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import (
    ActionResult,
    Category,
    Finding,
    Incident,
    IncidentState,
    Outcome,
    ProcessEvent,
    ProcessState,
    Role,
    Severity,
)
from ascend_doctor.core.store import SCHEMA_VERSION, SpanRecord, Store, StoreListener


def _finding() -> Finding:
    return Finding(
        rule="npu-oom",
        category=Category.NPU_OOM,
        severity=Severity.ERROR,
        role=Role.ROOT,
        subject="device:0",
        summary="NPU out of memory",
        path="server.log",
        offset=10,
        at=100.0,
    )


class Recorder(StoreListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def incident_changed(self, before: Incident | None, after: Incident) -> None:
        self.calls.append(("incident", (before and before.state, after.state)))

    def action_added(self, incident_id: int, result: ActionResult) -> None:
        self.calls.append(("action", result.name))

    def process_event(self, event: ProcessEvent) -> None:
        self.calls.append(("process", event.state.value))


class Broken(StoreListener):
    def finding_added(self, finding: Finding, incident_id: int | None) -> None:
        raise RuntimeError("listener bug")


def test_listeners_see_every_change_and_a_broken_one_is_isolated(tmp_path: Path) -> None:
    store = Store.in_dir(tmp_path)
    rec = Recorder()
    store.listeners += [Broken(), rec]
    inc = store.open_incident(_finding())
    assert store.add_finding(_finding(), inc.id)  # Broken raises; the write stands
    store.update_incident(inc.id, state=IncidentState.MITIGATING)
    store.add_action(inc.id, ActionResult("restart", {}, Outcome.OK, "why", 101.0))
    store.add_process_event(
        ProcessEvent(ProcessState.RUNNING, ProcessState.STARTING, 102.0, 42, reason="healthy")
    )
    assert rec.calls == [
        ("incident", (None, IncidentState.OPEN)),
        ("incident", (IncidentState.OPEN, IncidentState.MITIGATING)),
        ("action", "restart"),
        ("process", "RUNNING"),
    ]
    (event,) = store.process_events()
    assert (event.state, event.pid, event.reason) == (ProcessState.RUNNING, 42, "healthy")
    assert len(store.findings(inc.id)) == 1


def test_an_older_store_is_upgraded_in_place(tmp_path: Path) -> None:
    store = Store.in_dir(tmp_path)
    store.set_meta("kept", 1)
    store.close()
    db = sqlite3.connect(tmp_path / "doctor.db")
    db.execute("PRAGMA user_version=1")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="start the doctor on it once"):
        Store.in_dir(tmp_path, readonly=True)
    store = Store.in_dir(tmp_path)
    assert store.meta("kept") == 1
    store.close()
    assert Store.in_dir(tmp_path, readonly=True).meta("kept") == 1
    db = sqlite3.connect(tmp_path / "doctor.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def _span(trace: str, span: str, parent: str, start: int, source: str = "doctor") -> SpanRecord:
    return SpanRecord(
        trace, span, parent, f"s{span}", "internal", start, start + 5, "ok", {"a": 1},
        [{"name": "e", "time_ns": start, "attributes": {}}], {"service.name": "x"}, source,
        7 if source == "doctor" else None,
    )  # fmt: skip


def test_spans_round_trip_and_server_spans_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ascend_doctor.core.store_spans.SERVER_SPANS_KEPT", 3)
    store = Store.in_dir(tmp_path)
    store.add_spans([_span("t1", "b", "a", 20), _span("t1", "a", "", 10)])
    assert [s.span_id for s in store.spans("t1")] == ["a", "b"]
    assert store.spans("t1")[1].events[0]["name"] == "e"
    assert store.incident_trace_id(7) == "t1"
    assert store.incident_trace_id(8) is None
    store.add_spans([_span(f"r{i}", "x", "", 100 + i, "server") for i in range(5)])
    assert [s.trace_id for s in store.traces(source="server")] == ["r4", "r3", "r2"]
    assert [s.trace_id for s in store.traces(source="doctor")] == ["t1"]


def test_requests_are_queued_then_finished(tmp_path: Path) -> None:
    store = Store.in_dir(tmp_path)
    with pytest.raises(StoreError, match="unknown request kind"):
        store.add_request("reboot", None)
    rid = store.add_request("ack", 3, {"by": "tui"})
    assert [(r.kind, r.incident_id, r.params) for r in store.requests(pending_only=True)] == [
        ("ack", 3, {"by": "tui"})
    ]
    store.finish_request(rid, ok=True, result="acknowledged")
    assert store.requests(pending_only=True) == []
    (done,) = store.requests()
    assert (done.state, done.result) == ("done", "acknowledged")
