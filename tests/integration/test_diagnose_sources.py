"""``diagnose`` reads everything a bundle holds (issue 19): a saved ``npu-smi info`` that says
Critical is a root cause, the incidents the doctor recorded are listed beside what the logs
show (a hang seen only in the metrics), and one heartbeat loss is one root cause, led by the
line that names the device."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ascend_doctor.cli.main import main
from ascend_doctor.core.events import Category, Finding, Role, Severity
from ascend_doctor.core.store import Store

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_an_npu_smi_snapshot_that_says_critical_is_a_root_cause() -> None:
    snapshot = FIXTURES / "npu_smi" / "info-910b-critical.txt"
    code, out = run("diagnose", "--exit-code", str(snapshot))
    assert code == 1, out
    assert "npu-smi reports npu3 health Critical" in out
    assert "no known failure found" not in out
    healthy = FIXTURES / "npu_smi" / "info-910b-8cards.txt"
    code, out = run("diagnose", "--exit-code", str(healthy))
    assert code == 0 and "no known failure found" in out, out


def test_one_heartbeat_loss_is_one_root_cause_named_by_its_device() -> None:
    out = run("diagnose", "--json", str(FIXTURES / "incidents" / "heartbeat-el0001"))[1]
    causes = [c for c in json.loads(out)["root_causes"] if c["category"] == "device_fault"]
    assert len(causes) == 1, causes
    (cause,) = causes
    assert cause["subject"] == "npu3" and cause["rule"] == "rt-device-lost-heartbeat"
    assert "lost heartbeat" in cause["evidence"][0]["text"]
    assert any("507010" in e["text"] for e in cause["evidence"])  # the runtime's line too


def test_a_bundle_lists_the_incidents_no_log_line_shows(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = Store.in_dir(state)
    hang = Finding(
        "vllm-server-hang",
        Category.SERVER_HANG,
        Severity.CRITICAL,
        Role.ROOT,
        "server",
        "no token generated for a minute with requests running (4) while /health says 200",
        at=time.time(),
    )
    inc = store.open_incident(hang)
    store.add_finding(hang, inc.id)
    store.close()
    (state / "server.log").write_text("INFO 12-02 12:00:00 [api_server.py:1] started\n")
    bundle = tmp_path / "b.tar.gz"
    code, out = run("bundle", "--state-dir", str(state), "-o", str(bundle))
    assert code == 0, out
    code, out = run("diagnose", str(bundle))
    assert "INCIDENTS THE DOCTOR RECORDED" in out
    assert f"#{inc.id} open [server_hang] server: no token generated" in out
    assert "no known failure found" not in out
    data = json.loads(run("diagnose", "--json", str(bundle))[1])
    assert data["stored_incidents"][0]["category"] == "server_hang"
    assert data["stored_incidents"][0]["in_logs"] is False
