"""Each sink against a loopback receiver: payloads, dedup keys, HMAC, order, throttling."""

from __future__ import annotations

import hashlib
import hmac
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from alerts_support import FakeClock, Receiver, alerts_config, open_incident, rig, sink

from ascend_doctor.agent.alerts import Alert
from ascend_doctor.core.events import (
    ActionResult,
    Category,
    IncidentState,
    Outcome,
    Severity,
)
from ascend_doctor.core.store import Store
from ascend_doctor.sinks.pagerduty import PAYLOAD_MAX, event

KEY = "R0UT1NGKEY-abcdef0123456789"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


async def test_pagerduty_trigger_acknowledge_resolve_share_one_dedup_key(
    tmp_path: Path, receiver: Receiver
) -> None:
    config = alerts_config(
        sink("pd", "pagerduty", url=receiver.url + "/v2/enqueue", routing_key_env="PD_KEY")
    )
    r = rig(tmp_path / "state", config, {"PD_KEY": KEY})
    inc = open_incident(r.store)
    r.store.add_action(
        inc.id, ActionResult("reset_device", {"device": 3}, Outcome.OK, "reset npu3", 5.0)
    )
    await r.drain()
    # an operator acknowledges from another process: another connection writes the flag
    other = Store.in_dir(tmp_path / "state")
    other.update_incident(inc.id, acknowledged=True)
    other.close()
    await r.drain()
    r.store.update_incident(inc.id, state=IncidentState.RESOLVED, resolved_at=2e9)
    await r.drain()
    await r.drain()  # nothing left: nothing sent twice

    bodies = receiver.bodies()
    assert [b["event_action"] for b in bodies] == ["trigger", "acknowledge", "resolve"]
    assert {b["dedup_key"] for b in bodies} == {f"ascend-doctor:node-7:{inc.id}:1800000000"}
    assert all(b["routing_key"] == KEY for b in bodies)
    assert all(r.path == "/v2/enqueue" for r in receiver.requests)
    payload = bodies[0]["payload"]
    assert payload["severity"] == "critical"
    assert payload["source"] == "node-7"
    assert payload["component"] == "npu3"
    assert payload["group"] == "device_fault"
    assert len(payload["summary"]) <= 1024
    assert "NPU 3 lost its heartbeat" in payload["summary"]
    details = payload["custom_details"]
    assert details["root_cause"] == "NPU 3 lost its heartbeat"
    assert (
        details["evidence"][0] == "/var/log/npu/plog-1.log:1: [ERROR] heartbeat lost on device 3 #0"
    )
    assert details["actions"][0]["name"] == "reset_device"
    assert "trace_id" in details
    assert "payload" not in bodies[2]  # a resolve carries only the key
    # the routing key is in no outbox row and nowhere in the store's files
    r.store.close()
    stored = b"".join(p.read_bytes() for p in (tmp_path / "state").iterdir() if p.is_file())
    assert KEY.encode() not in stored
    assert b"R0UT1NGKEY" not in stored


def test_pagerduty_payload_within_512kb_trims_evidence_first() -> None:
    alert = Alert(
        kind="trigger",
        event="escalated",
        dedup_key="k",
        host="h",
        summary="s" * 5000,
        severity="error",
        category="npu_oom",
        subject="server",
        device="",
        incident_id=1,
        state="escalated",
        rule="r",
        root_cause="rc",
        explain="why",
        evidence=tuple("x" * 900 for _ in range(2000)),
        actions=({"name": "restart", "outcome": "ok", "reason": "r", "at": 1.0},),
    )
    data = event(alert, KEY)
    assert len(data) <= PAYLOAD_MAX
    doc = json.loads(data)
    details = doc["payload"]["custom_details"]
    assert len(doc["payload"]["summary"]) == 1024
    assert 0 < len(details["evidence"]) < 2000
    assert details["actions"] == [{"name": "restart", "outcome": "ok", "reason": "r", "at": 1.0}]


async def test_severity_maps_to_pagerduty_levels(tmp_path: Path, receiver: Receiver) -> None:
    config = alerts_config(
        sink("pd", "pagerduty", url=receiver.url, routing_key_env="PD_KEY", role="notify")
    )
    r = rig(tmp_path / "state", config, {"PD_KEY": KEY})
    for i, sev in enumerate(Severity):
        open_incident(r.store, severity=sev, at=1_800_000_000.0 + i)
    await r.drain()
    assert [b["payload"]["severity"] for b in receiver.bodies()] == [
        "info",
        "warning",
        "error",
        "critical",
    ]


async def test_slack_blocks_then_resolve_follow_up_at_one_message_a_second(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.default = (200, "ok")
    clock = FakeClock()
    config = alerts_config(sink("chat", "slack", url_env="SLACK_URL"))
    r = rig(tmp_path / "state", config, {"SLACK_URL": receiver.url + "/services/T0/B0/XyZ"}, clock)
    first = open_incident(r.store, at=1_800_000_000.0)
    open_incident(r.store, category=Category.NPU_OOM, subject="server", at=1_800_000_001.0)
    r.store.update_incident(first.id, state=IncidentState.RESOLVED, resolved_at=2e9)
    await r.drain()
    assert len(receiver.requests) == 1  # one token: the rest waits
    await r.drain()
    assert len(receiver.requests) == 1  # the same instant: still throttled
    clock.advance(0.5)
    await r.drain()
    assert len(receiver.requests) == 1
    clock.advance(0.5)
    await r.drain()
    assert len(receiver.requests) == 2
    clock.advance(1.0)
    await r.drain()
    clock.advance(1.0)
    await r.drain()
    bodies = receiver.bodies()
    assert len(bodies) == 3
    titles = [b["blocks"][0]["text"]["text"] for b in bodies]
    assert titles[0].startswith(":red_circle: Opened: incident #1 on node-7 npu3")
    assert titles[1].startswith(":red_circle: Opened: incident #2 on node-7 server")
    assert titles[2].startswith(":white_check_mark: Resolved: incident #1")
    kinds = [block["type"] for block in bodies[0]["blocks"]]
    assert kinds[:3] == ["header", "section", "context"]
    assert "heartbeat lost on device 3" in json.dumps(bodies[0]["blocks"])
    assert all(r.path == "/services/T0/B0/XyZ" for r in receiver.requests)


async def test_webhook_body_is_signed_with_hmac_sha256(tmp_path: Path, receiver: Receiver) -> None:
    receiver.default = (204, "")
    secret = "s3cret-for-hmac"
    (tmp_path / "secret").write_text(secret + "\n")
    config = alerts_config(
        sink(
            "hook",
            "webhook",
            url=receiver.url + "/hook",
            secret_file=str(tmp_path / "secret"),
            headers=("X-Team: inference", "Authorization: env:HOOK_TOKEN"),
        )
    )
    r = rig(tmp_path / "state", config, {"HOOK_TOKEN": "Bearer tok-123"})
    inc = open_incident(r.store)
    await r.drain()
    (req,) = receiver.requests
    ts = req.headers["x-ascend-doctor-timestamp"]
    want = hmac.new(secret.encode(), ts.encode() + b"." + req.body, hashlib.sha256).hexdigest()
    assert req.headers["x-ascend-doctor-signature"] == "sha256=" + want
    assert req.headers["x-ascend-doctor-schema"] == "ascend-doctor.alert/v1"
    assert req.headers["x-team"] == "inference"
    assert req.headers["authorization"] == "Bearer tok-123"
    doc = req.json()
    assert doc["schema"] == "ascend-doctor.alert/v1"
    assert doc["kind"] == "trigger" and doc["event"] == "opened"
    assert doc["incident_id"] == inc.id and doc["device"] == "npu3"
    assert doc["evidence"] and doc["root_cause"] == "NPU 3 lost its heartbeat"
    tampered = hmac.new(b"wrong", ts.encode() + b"." + req.body, hashlib.sha256).hexdigest()
    assert req.headers["x-ascend-doctor-signature"] != "sha256=" + tampered


async def test_command_gets_alert_on_stdin_and_non_zero_exit_is_a_failed_delivery(
    tmp_path: Path,
) -> None:
    out = tmp_path / "got.jsonl"
    fail_flag = tmp_path / "fail"
    fail_flag.write_text("1")
    script = tmp_path / "page.py"
    script.write_text(
        "import sys, pathlib\n"
        f"if pathlib.Path({str(fail_flag)!r}).exists():\n"
        "    sys.stderr.write('pager unreachable'); sys.exit(3)\n"
        f"with open({str(out)!r}, 'a') as f: f.write(sys.stdin.read())\n"
    )
    config = alerts_config(
        sink("cmd", "command", argv=(sys.executable, str(script), "--from", "doctor"))
    )
    r = rig(tmp_path / "state", config, {"PATH": "/usr/bin:/bin"})
    open_incident(r.store)
    await r.drain()
    (row,) = r.store.alerts(sink="cmd")
    assert row.status == "pending" and row.attempts == 1
    assert row.last_error == "exit status 3" and "pager unreachable" in row.response
    fail_flag.unlink()
    r.clock.advance(600)
    await r.drain()
    (row,) = r.store.alerts(sink="cmd")
    assert row.status == "sent" and row.attempts == 2
    (line,) = out.read_text().splitlines()
    assert json.loads(line)["dedup_key"] == row.dedup_key
