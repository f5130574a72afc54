"""``status`` tells the truth (issue 19): whether the doctor runs, the server's real state,
what waits for a human and how to acknowledge it; exit codes a script can rely on. And the
``incidents`` group's options reach its subcommands; times and the acknowledged mark show."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ascend_doctor.cli.main import main
from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.events import Category, Finding, IncidentState, ProcessState, Role, Severity
from ascend_doctor.core.procs import process_start
from ascend_doctor.core.records import DoctorStatus, LaunchRecord, ServerStatus
from ascend_doctor.core.store import Store

pytestmark = pytest.mark.integration


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def make_state(tmp_path: Path, *, doctor_alive: bool, server_alive: bool) -> Path:
    state = tmp_path / "state"
    store = Store.in_dir(state)
    me, began = os.getpid(), process_start(os.getpid()) or 0.0
    gone = dead_pid()
    now = time.time()
    store.set_launch(
        LaunchRecord(("vllm", "serve", "m"), {"PATH": "/a:/b:/c", "ASCEND_RT_VISIBLE_DEVICES": "0"})
    )
    server_pid = me if server_alive else gone
    store.set_server(
        ServerStatus(ProcessState.RUNNING, server_pid, now - 30, "/health answered 200", began)
    )
    store.set_doctor(
        DoctorStatus(
            pid=me if doctor_alive else gone,
            started_at=now - 60,
            mode="auto",
            dry_run=False,
            attached=False,
            remediation=RemediationConfig(),
            proc_start=began,
        )
    )
    store.close()
    return state


def escalate(state: Path, subject: str = "npu0") -> int:
    store = Store.in_dir(state)
    f = Finding(
        "drv-soft-fault-heartbeat-lost",
        Category.DEVICE_FAULT,
        Severity.CRITICAL,
        Role.ROOT,
        subject,
        "NPU 0 lost its heartbeat",
        at=time.time(),
    )
    inc = store.open_incident(f)
    store.update_incident(inc.id, state=IncidentState.ESCALATED, resolved_at=time.time())
    store.close()
    return inc.id


def test_a_dead_doctor_is_not_running_and_its_server_state_is_the_last_record(
    tmp_path: Path,
) -> None:
    state = make_state(tmp_path, doctor_alive=False, server_alive=False)
    code, out = run("status", "--state-dir", str(state))
    assert code == 3, out
    assert out.startswith("doctor: NOT running since ")
    assert "what follows is its last record" in out
    assert "is gone: the server is not running" in out


def test_an_escalated_incident_waits_for_a_human_until_acknowledged(tmp_path: Path) -> None:
    state = make_state(tmp_path, doctor_alive=True, server_alive=True)
    assert run("status", "--state-dir", str(state))[0] == 0
    inc = escalate(state)
    code, out = run("status", "--state-dir", str(state))
    assert code == 1, out
    assert f"WAITING FOR A HUMAN: incident #{inc} escalated" in out
    assert f"ack: ascend-doctor incidents ack {inc} --state-dir {state}" in out
    assert out.startswith("doctor: running (pid ")
    # the group's --state-dir reaches the subcommand
    assert run("incidents", "--state-dir", str(state), "ack", str(inc))[0] == 0
    code, out = run("status", "--state-dir", str(state))
    assert code == 0 and "WAITING" not in out, out
    data = json.loads(run("status", "--state-dir", str(state), "--json")[1])
    assert data["doctor_running"] is True and data["waiting_for_human"] == []


def test_a_server_whose_pid_is_gone_is_not_running(tmp_path: Path) -> None:
    state = make_state(tmp_path, doctor_alive=True, server_alive=False)
    code, out = run("status", "--state-dir", str(state))
    assert code == 1
    assert "is gone: the server is not running" in out


def test_status_does_not_print_the_whole_path(tmp_path: Path) -> None:
    state = make_state(tmp_path, doctor_alive=True, server_alive=True)
    out = run("status", "--state-dir", str(state))[1]
    assert "launch: ASCEND_RT_VISIBLE_DEVICES=0 vllm serve m" in out
    assert "/a:/b:/c" not in out


def test_no_store_is_exit_2_for_every_reader(tmp_path: Path) -> None:
    for args in (["status"], ["incidents"], ["incidents", "show", "1"], ["overrides", "list"]):
        code, out = run(*args, "--state-dir", str(tmp_path / "nothing"))
        assert code == 2 and "no store here" in out, (args, out)


def test_incidents_group_options_reach_show_and_ack(tmp_path: Path) -> None:
    state = make_state(tmp_path, doctor_alive=True, server_alive=True)
    inc = escalate(state)
    code, out = run("incidents", "--state-dir", str(state), "--utc", "show", str(inc))
    assert code == 0, out
    assert " UTC; not acknowledged" in out and "opened 20" in out
    code, out = run("incidents", "--state-dir", str(state), "show", str(inc), "--state-dir", "/x")
    assert code == 2 and "--state-dir given twice" in out
    code, out = run("incidents", "--state-dir", str(state), "--json", "show", str(inc))
    assert code == 2 and "--json lists incidents" in out
    run("incidents", "--state-dir", str(state), "ack", str(inc))
    out = run("incidents", "--state-dir", str(state), "--utc")[1]
    assert f"#{inc} escalated  ACKED critical" in out
    assert "opened 20" in out and "UTC, escalated 20" in out


def test_attach_to_nothing_says_so_at_once_and_opens_an_incident_after_start_timeout(
    tmp_path: Path,
) -> None:
    from ascend_doctor.cli.demo import free_port
    from tests.conftest import poll

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    config = tmp_path / "doctor.toml"
    config.write_text(
        "[server]\nstart_timeout = 3\nhealth_interval = 0.5\n"
        "[collectors.npu_smi]\nenabled = false\n"
    )
    state = tmp_path / "state"
    log = tmp_path / "watch.out"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "ascend_doctor", "watch", "--attach", "--url", url),
                *("--config", str(config), "--state-dir", str(state)),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        poll(lambda: f"nothing answers at {url}" in log.read_text(), 30, "the warning")

        def down() -> str | None:
            out = run("incidents", "--state-dir", str(state))[1]
            return out if "server_crashed" in out else None

        out = poll(down, 60, "a server-down incident")
        assert f"no answer at {url} for 3s" in out
        code, out = run("status", "--state-dir", str(state))
        assert "server: unknown" not in out and code == 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
