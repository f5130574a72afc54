"""The outbox: outages, restarts, permanent failures, group wait, silences, routes, re-sends."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from alerts_support import FakeClock, Receiver, alerts_config, open_incident, rig, sink

from ascend_doctor.core.config import AlertRouteConfig
from ascend_doctor.core.events import Category, IncidentState, Severity
from ascend_doctor.sinks.alertmanager import ALERTNAME

KEY = "pd-routing-key-0123456789"
ENV = {"PD_KEY": KEY}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def pd(receiver: Receiver, **kw: object) -> object:
    return sink("pd", "pagerduty", url=receiver.url, routing_key_env="PD_KEY", **kw)


async def test_sink_down_for_an_hour_then_a_doctor_restart_loses_nothing(
    tmp_path: Path, receiver: Receiver
) -> None:
    state = tmp_path / "state"
    clock = FakeClock()
    config = alerts_config(pd(receiver))
    r = rig(state, config, ENV, clock)
    receiver.fail(10_000, 503)  # down until told otherwise
    a = open_incident(r.store, at=1_800_000_000.0)
    b = open_incident(r.store, category=Category.NPU_OOM, subject="server", at=1_800_000_100.0)
    r.store.update_incident(a.id, state=IncidentState.RESOLVED, resolved_at=1_800_000_200.0)
    for _ in range(120):  # an hour of passes, 30 s apart
        await r.drain(step=30.0)
    attempts = len(receiver.requests)
    # backoff: a handful of attempts in an hour, never one per pass
    assert 10 <= attempts <= 40  # 120 passes
    assert receiver.bodies() == []
    rows = r.store.alerts(sink="pd")
    assert [(row.kind, row.status) for row in rows] == [
        ("trigger", "pending"),
        ("trigger", "pending"),
        ("resolve", "pending"),
    ]
    assert rows[0].attempts == attempts  # only the oldest was tried: the sink was down
    status = r.store.sinks()["pd"]
    assert status.queued == 3 and status.failures == attempts
    assert status.last_error.startswith("HTTP 503")
    r.store.close()

    # the doctor restarts; the sink comes back
    with receiver.lock:
        receiver.replies.clear()
    r2 = rig(state, config, ENV, clock)
    for _ in range(4):  # the backoff persisted: the oldest row waits out its delay (<= 300 s)
        await r2.drain(step=100.0)
    bodies = receiver.bodies()
    key_a = f"ascend-doctor:node-7:{a.id}:1800000000"
    key_b = f"ascend-doctor:node-7:{b.id}:1800000100"
    sent = [(x["event_action"], x["dedup_key"]) for x in bodies]
    assert len(sent) == 3  # exactly once each
    assert [k for k, key in sent if key == key_a] == ["trigger", "resolve"]  # in order
    assert [k for k, key in sent if key == key_b] == ["trigger"]
    bodies = [x for x in bodies if x["dedup_key"] == key_a]
    # the trigger sent after the outage carries the incident as it is now
    assert bodies[0]["payload"]["custom_details"]["state"] == "resolved"
    assert [row.status for row in r2.store.alerts(sink="pd")] == ["sent"] * 3
    assert r2.store.sinks()["pd"].queued == 0
    r2.store.close()


async def test_rejected_alert_is_a_permanent_failure_recorded_with_the_response(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.fail(1, 400, '{"status":"invalid event","errors":["routing_key is invalid"]}')
    r = rig(tmp_path / "state", alerts_config(pd(receiver)), ENV)
    inc = open_incident(r.store)
    await r.drain()
    (row,) = r.store.alerts(sink="pd")
    assert row.status == "failed" and row.attempts == 1
    assert row.last_error == "HTTP 400 (rejected)"
    assert "routing_key is invalid" in row.response
    # nothing waits behind it: the next incident goes; the rejected one's resolve is not sent
    r.store.update_incident(inc.id, state=IncidentState.RESOLVED, resolved_at=2e9)
    open_incident(r.store, category=Category.NPU_OOM, subject="server", at=2e9)
    await r.drain()
    await r.drain()
    assert [b["payload"]["group"] for b in receiver.bodies()] == ["npu_oom"]
    status = r.store.sinks()["pd"]
    assert status.failed == 1 and status.sent == 1 and status.failures == 1
    assert "routing_key is invalid" in status.last_error
    assert KEY not in str(status)


async def test_429_waits_at_least_retry_after(tmp_path: Path, receiver: Receiver) -> None:
    receiver.fail(1, 429, "slow down", **{"Retry-After": "40"})
    clock = FakeClock()
    r = rig(tmp_path / "state", alerts_config(pd(receiver)), ENV, clock)
    open_incident(r.store)
    await r.drain()
    (row,) = r.store.alerts(sink="pd")
    assert row.status == "pending" and row.next_at >= clock.now + 40
    clock.advance(39)
    await r.drain()
    assert len(receiver.requests) == 1
    clock.advance(2)
    await r.drain()
    assert len(receiver.requests) == 2 and receiver.bodies()[0]["event_action"] == "trigger"


async def test_group_wait_sends_the_latest_transition_and_drops_a_flap(
    tmp_path: Path, receiver: Receiver
) -> None:
    clock = FakeClock()
    config = alerts_config(sink("hook", "webhook", url=receiver.url), group_wait=30.0)
    r = rig(tmp_path / "state", config, {}, clock)
    flap = open_incident(r.store, at=clock.now)
    r.store.update_incident(flap.id, state=IncidentState.RESOLVED, resolved_at=clock.now)
    stuck = open_incident(r.store, category=Category.NPU_OOM, subject="server", at=clock.now + 1)
    r.store.update_incident(stuck.id, state=IncidentState.ESCALATED, resolved_at=clock.now)
    await r.drain()
    assert receiver.requests == []  # nothing before the group wait
    clock.advance(31)
    await r.drain()
    bodies = receiver.bodies()
    assert [(b["incident_id"], b["kind"], b["event"]) for b in bodies] == [
        (stuck.id, "trigger", "escalated")
    ]
    statuses = [(row.incident_id, row.status) for row in r.store.alerts(sink="hook")]
    assert statuses == [(flap.id, "superseded"), (stuck.id, "sent")]


async def test_silence_holds_back_a_category_and_its_resolve(
    tmp_path: Path, receiver: Receiver
) -> None:
    clock = FakeClock()
    r = rig(tmp_path / "state", alerts_config(sink("hook", "webhook", url=receiver.url)), {}, clock)
    silence = r.store.add_silence("npu_oom", "", clock.now + 7200, "known, being fixed")
    quiet = open_incident(r.store, category=Category.NPU_OOM, subject="server", at=clock.now)
    loud = open_incident(r.store, category=Category.DEVICE_FAULT, at=clock.now + 1)
    r.store.update_incident(quiet.id, state=IncidentState.RESOLVED, resolved_at=clock.now)
    await r.drain()
    assert [b["incident_id"] for b in receiver.bodies()] == [loud.id]
    assert [row.status for row in r.store.alerts(incident_id=quiet.id)] == ["silenced"]
    assert r.store.remove_silence(silence)
    again = open_incident(r.store, category=Category.NPU_OOM, subject="server", at=clock.now + 9)
    await r.drain()
    assert [b["incident_id"] for b in receiver.bodies()] == [loud.id, again.id]


async def test_default_routes_page_only_for_escalated_or_critical(
    tmp_path: Path, receiver: Receiver
) -> None:
    chat = Receiver(default=(200, "ok"))
    try:
        config = alerts_config(
            pd(receiver), sink("chat", "slack", url_env="SLACK_URL", rate=100.0, burst=100)
        )
        r = rig(tmp_path / "state", config, {**ENV, "SLACK_URL": chat.url}, FakeClock())
        err = open_incident(r.store, severity=Severity.ERROR, category=Category.NPU_OOM)
        open_incident(r.store, severity=Severity.CRITICAL, at=1_800_000_050.0)
        await r.drain()
        assert [b["payload"]["severity"] for b in receiver.bodies()] == ["critical"]
        r.store.update_incident(err.id, state=IncidentState.ESCALATED, resolved_at=2e9)
        await r.drain()
        paged = receiver.bodies()
        assert [b["payload"]["custom_details"]["event"] for b in paged] == ["opened", "escalated"]
        assert len(chat.bodies()) == 3  # notify: every transition
    finally:
        chat.close()


async def test_routes_choose_sinks_by_category_severity_and_event(
    tmp_path: Path, receiver: Receiver
) -> None:
    routes = (
        AlertRouteConfig(
            sinks=("pd",), categories=("device_fault",), min_severity="error", events=("opened",)
        ),
    )
    r = rig(tmp_path / "state", alerts_config(pd(receiver), routes=routes), ENV)
    open_incident(r.store, category=Category.DEVICE_FAULT, severity=Severity.ERROR)
    open_incident(r.store, category=Category.DEVICE_FAULT, severity=Severity.WARNING, at=2e9)
    open_incident(r.store, category=Category.NPU_OOM, subject="server", at=2e9 + 1)
    await r.drain()
    bodies = receiver.bodies()
    assert [(b["payload"]["group"], b["payload"]["severity"]) for b in bodies] == [
        ("device_fault", "error")
    ]


async def test_alertmanager_firing_alert_is_resent_until_resolved(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.default = (200, "")
    clock = FakeClock()
    config = alerts_config(sink("am", "alertmanager", url=receiver.url, resend_interval=60.0))
    r = rig(tmp_path / "state", config, {}, clock)
    inc = open_incident(r.store, at=clock.now)
    await r.drain()
    clock.advance(61)
    await r.drain()
    clock.advance(61)
    await r.drain()
    resolved_at = clock.now
    r.store.update_incident(inc.id, state=IncidentState.RESOLVED, resolved_at=resolved_at)
    await r.drain()
    clock.advance(200)
    await r.drain()
    bodies = receiver.bodies()
    assert all(req.path == "/api/v2/alerts" for req in receiver.requests)
    assert len(bodies) == 4  # trigger, two re-sends, resolve; nothing after it
    first = bodies[0][0]
    assert first["labels"] == {
        "alertname": ALERTNAME,
        "category": "device_fault",
        "severity": "critical",
        "host": "node-7",
        "device": "npu3",
        "dedup_key": f"ascend-doctor:node-7:{inc.id}:1800000000",
    }
    assert first["annotations"]["summary"].startswith("NPU 3 lost its heartbeat")
    # firing: endsAt four re-send intervals ahead (of Alertmanager's clock: real time)
    ends = datetime.fromisoformat(bodies[2][0]["endsAt"].replace("Z", "+00:00")).timestamp()
    assert time.time() + 200 < ends <= time.time() + 240
    # resolved: endsAt is when it was resolved
    resolved = datetime.fromisoformat(bodies[3][0]["endsAt"].replace("Z", "+00:00")).timestamp()
    assert resolved == resolved_at


async def test_old_finished_rows_are_pruned_but_what_a_sink_was_last_told_stays(
    tmp_path: Path, receiver: Receiver
) -> None:
    clock = FakeClock()
    r = rig(tmp_path / "state", alerts_config(sink("hook", "webhook", url=receiver.url)), {}, clock)
    done = open_incident(r.store, at=clock.now)
    firing = open_incident(r.store, category=Category.NPU_OOM, subject="server", at=clock.now)
    r.store.update_incident(firing.id, state=IncidentState.ESCALATED, resolved_at=clock.now)
    await r.drain()
    r.store.update_incident(done.id, state=IncidentState.RESOLVED, resolved_at=clock.now)
    await r.drain()
    assert len(r.store.alerts(sink="hook")) == 3  # opened, escalated (coalesced), resolved
    clock.advance(8 * 86400)
    await r.drain()
    kept = [(row.incident_id, row.kind, row.event) for row in r.store.alerts(sink="hook")]
    # (the escalated one, never acknowledged, was repeated after the repeat interval)
    assert kept == [(done.id, "resolve", "resolved"), (firing.id, "trigger", "escalated")]
    assert r.store.alerts(sink="hook")[-1].alert["repeat"] is True


async def test_unacknowledged_firing_alert_repeats_until_acknowledged(
    tmp_path: Path, receiver: Receiver
) -> None:
    clock = FakeClock()
    config = alerts_config(sink("hook", "webhook", url=receiver.url), repeat_interval=3600.0)
    r = rig(tmp_path / "state", config, {}, clock)
    inc = open_incident(r.store, at=clock.now)
    r.store.update_incident(inc.id, state=IncidentState.ESCALATED, resolved_at=clock.now)
    await r.drain()
    clock.advance(1800)
    await r.drain()
    assert [(b["event"], b["repeat"]) for b in receiver.bodies()] == [("escalated", False)]
    clock.advance(1801)
    await r.drain()
    clock.advance(1)
    await r.drain()  # queued by the repeat scan, sent on the next pass at the latest
    assert [(b["event"], b["repeat"]) for b in receiver.bodies()] == [
        ("escalated", False),
        ("escalated", True),
    ]
    r.store.update_incident(inc.id, acknowledged=True)
    await r.drain()
    clock.advance(5 * 3600)
    await r.drain()
    await r.drain()
    kinds = [(b["kind"], b["repeat"]) for b in receiver.bodies()]
    assert kinds == [("trigger", False), ("trigger", True), ("acknowledge", False)]


async def test_incident_that_becomes_critical_while_unresolved_pages(
    tmp_path: Path, receiver: Receiver
) -> None:
    chat = Receiver(default=(200, "ok"))
    try:
        config = alerts_config(
            pd(receiver), sink("chat", "slack", url_env="SLACK_URL", rate=100.0, burst=100)
        )
        r = rig(tmp_path / "state", config, {**ENV, "SLACK_URL": chat.url})
        inc = open_incident(r.store, severity=Severity.ERROR)
        await r.drain()
        assert receiver.bodies() == [] and len(chat.bodies()) == 1
        r.store.update_incident(inc.id, severity=Severity.CRITICAL)
        await r.drain()
        r.store.update_incident(inc.id, summary="worse")  # no transition: nothing new
        await r.drain()
        assert [b["payload"]["severity"] for b in receiver.bodies()] == ["critical"]
        assert len(chat.bodies()) == 1  # it already heard of it
    finally:
        chat.close()
