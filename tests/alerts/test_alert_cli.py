"""Alerts through the real CLI and a real doctor process: ``alerts test``, ``silence``,
``status``, a misconfigured sink at start-up, and ``incidents ack`` from another process
reaching PagerDuty as an acknowledge."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from alerts_support import Receiver, alerts_config, open_incident, rig, sink

from tests.conftest import poll

pytestmark = pytest.mark.integration

KEY = "cli-routing-key-9f8e7d6c5b4a"


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ascend_doctor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_alerts_test_reports_each_sink(tmp_path: Path, receiver: Receiver) -> None:
    broken = Receiver(default=(500, "internal error"))
    try:
        cfg = tmp_path / "doctor.toml"
        cfg.write_text(
            f"""
[alerts]
host = "node-7"

[[alerts.sinks]]
name = "pd"
type = "pagerduty"
url = "{receiver.url}/v2/enqueue"
routing_key_env = "PD_KEY"

[[alerts.sinks]]
name = "hook"
type = "webhook"
url = "{broken.url}/hook"
"""
        )
        out = doctor("alerts", "test", "--config", str(cfg), env={"PD_KEY": KEY})
        assert out.returncode == 1, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].startswith("pd (pagerduty): ok 202")
        assert lines[1] == "hook (webhook): FAILED HTTP 500 (500 internal error)"
        bodies = receiver.bodies()
        assert [b["event_action"] for b in bodies] == ["trigger", "resolve"]
        assert bodies[0]["payload"]["custom_details"]["event"] == "test"
        assert bodies[0]["dedup_key"] == bodies[1]["dedup_key"]
        assert KEY not in out.stdout + out.stderr

        only = doctor("alerts", "test", "--config", str(cfg), "--sink", "pd", env={"PD_KEY": KEY})
        assert only.returncode == 0 and only.stdout.count("\n") == 1
        assert len(broken.requests) == 1  # not tried again

        missing = doctor("alerts", "test", "--config", str(cfg))
        assert missing.returncode == 1
        assert "alerts.sinks[0].routing_key_env': environment variable PD_KEY" in missing.stderr
    finally:
        broken.close()


def test_silence_add_list_rm(tmp_path: Path) -> None:
    state = tmp_path / "state"
    rig(state, alerts_config(), {}).store.close()
    added = doctor(
        "silence", "add", "--category", "npu_oom", "--for", "2h", "--state-dir", str(state)
    )
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("silence 1: npu_oom until ")
    listed = doctor("silence", "list", "--state-dir", str(state))
    assert listed.stdout.split()[:2] == ["1", "npu_oom"]
    bad = doctor(
        "silence", "add", "--category", "npu_oops", "--for", "2h", "--state-dir", str(state)
    )
    assert bad.returncode == 2 and "expected one of" in bad.stderr
    assert doctor("silence", "rm", "1", "--state-dir", str(state)).returncode == 0
    assert doctor("silence", "list", "--state-dir", str(state)).stdout == "no silences\n"
    assert doctor("silence", "rm", "1", "--state-dir", str(state)).returncode == 1


async def test_status_shows_a_sink_that_rejects_alerts(tmp_path: Path, receiver: Receiver) -> None:
    receiver.fail(1, 403, "forbidden")
    state = tmp_path / "state"
    config = alerts_config(
        sink("pd", "pagerduty", url=receiver.url, routing_key_env="PD_KEY"),
    )
    r = rig(state, config, {"PD_KEY": KEY})
    open_incident(r.store)
    await r.drain()
    r.store.close()
    out = doctor("status", "--state-dir", str(state))
    assert out.returncode == 3, out.stderr  # no doctor announced itself in this store
    assert (
        "alert sink pd (pagerduty): 0 sent, 0 queued, 1 rejected, 1 failed attempt,"
        " last error: HTTP 403 (rejected) (403 forbidden)" in out.stdout
    )


def test_misconfigured_sink_stops_watch_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "doctor.toml"
    cfg.write_text('[[alerts.sinks]]\nname = "chat"\ntype = "slack"\nurl_env = "SLACK_URL"\n')
    out = doctor("watch", "--config", str(cfg), "--state-dir", str(tmp_path / "s"))
    assert out.returncode == 1
    assert "config 'alerts.sinks[0].url_env': environment variable SLACK_URL is not set" in (
        out.stderr
    )


OOM = (
    "RuntimeError: NPU out of memory. Tried to allocate 2.93 GiB (NPU 0; 60.97 GiB total"
    " capacity; 55.12 GiB already allocated; 55.12 GiB current active; 1.85 GiB free; 57.20 GiB"
    " reserved in total by PyTorch)\n"
)


def test_watch_pages_and_an_ack_from_the_cli_reaches_pagerduty(
    tmp_path: Path, receiver: Receiver
) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("INFO starting\n")
    state = tmp_path / "state"
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(
        f"""
[logs]
cann = false
read_from = "beginning"
poll_interval = 0.1

[collectors.npu_smi]
enabled = false

[alerts]
host = "node-7"
group_wait = 0.0
poll_interval = 0.1

[[alerts.sinks]]
name = "pd"
type = "pagerduty"
url = "{receiver.url}/v2/enqueue"
routing_key_env = "PD_KEY"
"""
    )
    env = {**os.environ, "PD_KEY": KEY}
    cmd = [sys.executable, "-m", "ascend_doctor", "watch", "--config", str(cfg)]
    cmd += ["--state-dir", str(state), "--log", str(log)]
    out = open(tmp_path / "doctor.out", "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        poll(lambda: (state / "doctor.db").exists(), 30, "the store")
        with log.open("a") as f:
            f.write(OOM)
        poll(lambda: receiver.bodies(), 30, "the trigger")
        trigger = receiver.bodies()[0]
        assert trigger["event_action"] == "trigger"
        assert trigger["payload"]["group"] == "npu_oom"
        assert trigger["payload"]["severity"] == "critical"
        acked = doctor("incidents", "ack", "1", "--state-dir", str(state))
        assert acked.returncode == 0, acked.stderr
        poll(lambda: len(receiver.bodies()) >= 2, 30, "the acknowledge")
        ack = receiver.bodies()[1]
        assert ack == {
            "routing_key": KEY,
            "event_action": "acknowledge",
            "dedup_key": trigger["dedup_key"],
        }
        status = poll(
            lambda: (
                (s := doctor("status", "--state-dir", str(state)).stdout)
                and "alert sink pd (pagerduty): 2 sent" in s
                and s
            ),
            30,
            "status",
        )
        assert "0 queued" in status
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        out.close()
    assert proc.returncode == 0
    assert len(receiver.bodies()) == 2  # nothing sent twice
    assert KEY not in (tmp_path / "doctor.out").read_text()
