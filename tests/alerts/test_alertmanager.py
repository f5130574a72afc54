"""Against a real Alertmanager (Debian's prometheus-alertmanager, started here on loopback
with a temporary config and storage): the demo's escalated incident fires in
``/api/v2/alerts`` with the right labels, and an incident the doctor fixes is resolved there
(Alertmanager itself notifies "resolved" to its webhook receiver)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from alerts_support import Receiver

from ascend_doctor.cli.demo import free_port
from ascend_doctor.sinks.alertmanager import ALERTNAME
from tests.conftest import poll

pytestmark = pytest.mark.integration

BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[tuple[str, Receiver]]:
    if BINARY is None:
        pytest.skip("prometheus-alertmanager is not installed (apt-get install it; .ci/run does)")
    hook = Receiver(default=(200, ""))
    cfg = tmp_path / "alertmanager.yml"
    cfg.write_text(
        f"""
route:
  receiver: hook
  group_by: [dedup_key]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: "{hook.url}/am"
        send_resolved: true
"""
    )
    port = free_port()
    log = open(tmp_path / "alertmanager.log", "wb")
    proc = subprocess.Popen(
        [
            BINARY,
            f"--config.file={cfg}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(url + "/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        poll(ready, 30, "alertmanager ready")
        yield url, hook
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        hook.close()


CONFIG = """
[server]
start_timeout = 60.0
backoff_initial = 0.5
backoff_max = 5.0
probe_interval = 1.0
stop_grace = 5.0

[collectors.npu_smi]
interval = 1.0
timeout = 5.0

[collectors.process]
interval = 1.0

[remediation]
allow_device_reset = false   # the faulty device cannot be reset: the incident escalates
reset_settle = 1.0
settle_seconds = 3.0
command_timeout = 30.0

[alerts]
host = "node-7"
group_wait = 0.0
poll_interval = 0.2

[[alerts.sinks]]
name = "am"
type = "alertmanager"
url = "{url}"
resend_interval = 60.0
"""


def active(url: str) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = httpx.get(url + "/api/v2/alerts", timeout=5).json()
    return alerts


def test_escalated_incident_fires_and_fixed_incident_resolves_in_alertmanager(
    tmp_path: Path, alertmanager: tuple[str, Receiver]
) -> None:
    url, hook = alertmanager
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(CONFIG.format(url=url))
    state = tmp_path / "state"
    result = subprocess.run(
        [sys.executable, "-m", "ascend_doctor", "demo", "--config", str(cfg), "--state-dir",
         str(state), "--scenario", "device-fault", "--scenario", "kv-cache"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    lines = result.stdout.splitlines()
    assert "  device-fault   NOT AS EXPECTED (wanted recovered)" in lines, (
        result.stdout + result.stderr
    )
    assert "  kv-cache       recovered" in lines, result.stdout + result.stderr

    # the escalated incident is firing in Alertmanager, labelled as on-call routes on
    # (the plog's heartbeat loss and npu-smi's Critical health may make two incidents: each
    # escalated incident is one alert, with its own dedup key)
    firing = [a for a in active(url) if a["labels"].get("category") == "device_fault"]
    assert firing, active(url)
    assert len({a["labels"]["dedup_key"] for a in firing}) == len(firing)
    for alert in firing:
        assert alert["status"]["state"] == "active"
        labels = alert["labels"]
        assert labels["alertname"] == ALERTNAME
        assert labels["severity"] == "critical"
        assert labels["host"] == "node-7"
        assert labels["device"] == "npu3"
        assert labels["dedup_key"].startswith("ascend-doctor:node-7:")
        assert alert["annotations"]["state"] == "escalated"
        assert alert["annotations"]["explain"]
        assert "device_fault on node-7 npu3" in alert["annotations"]["summary"]

    # the fixed incident was firing, then resolved: no longer active, and Alertmanager told
    # its own receiver "firing" then "resolved"
    assert not [a for a in active(url) if a["labels"]["category"] == "kv_cache_insufficient"]

    def notified() -> list[tuple[str, str]]:
        out = []
        for body in hook.bodies():
            for a in body["alerts"]:
                out.append((a["labels"]["category"], a["status"]))
        return out

    poll(lambda: ("kv_cache_insufficient", "resolved") in notified(), 30, "resolved notice")
    seen = notified()
    kv = [s for c, s in seen if c == "kv_cache_insufficient"]
    assert kv[0] == "firing" and kv[-1] == "resolved"
    assert ("device_fault", "firing") in seen
    assert ("device_fault", "resolved") not in seen
    # the outbox: every alert delivered, none pending
    done = subprocess.run(
        [sys.executable, "-m", "ascend_doctor", "status", "--json", "--state-dir", str(state)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # the demo's doctor has stopped: status says so
    status = json.loads(done.stdout)
    am = status["alerts"]["am"]
    assert am["queued"] == 0 and am["failed"] == 0 and am["sent"] >= 3
