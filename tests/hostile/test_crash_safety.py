"""Issue 15, point 5, against the simulated host through the real CLI: one doctor per state
dir; a doctor SIGKILLed while the server runs or in the middle of a device reset is put right
by the next one before it starts a server."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ascend_doctor.core.events import ProcessState
from ascend_doctor.core.procs import pid_alive
from ascend_doctor.sim.host import SimHost
from tests.conftest import alive, poll
from tests.integration.test_remediation_live import CONFIG, Doctor, serve

pytestmark = pytest.mark.integration


def _running(doc: Doctor, other_than: int | None = None) -> object:
    return poll(
        lambda: (
            (m := doc.read(lambda s: s.server()))
            and m.state == ProcessState.RUNNING
            and m.pid != other_than
            and m
        ),
        90,
        "the server to be healthy",
    )


def test_a_second_doctor_on_the_same_state_dir_exits_naming_the_first(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host", load_seconds=0.2)
    doc = Doctor(tmp_path, host)
    argv, env = serve(host, 2, "--max-model-len", "8192")
    doc.start("--", *argv, env=env)
    try:
        _running(doc)
        assert doc.proc is not None
        second = subprocess.run(
            [sys.executable, "-m", "ascend_doctor", "watch", "--config", str(doc.cfg),
             "--state-dir", str(doc.state), "--", *argv],
            capture_output=True, text=True, timeout=60, env={**host.env(), **env,
                                                             "PATH": host.env()["PATH"]},
        )  # fmt: skip
        assert second.returncode == 1
        lines = [ln for ln in second.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and f"pid {doc.proc.pid}" in lines[0], second.stderr
        assert doc.proc.poll() is None and doc.starts() == 1, "the first goes on alone"
    finally:
        assert doc.stop() == 0


def test_a_server_left_by_a_killed_doctor_is_stopped_before_a_new_one(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host", load_seconds=0.2)
    doc = Doctor(tmp_path, host)
    argv, env = serve(host, 4, "--max-model-len", "8192")
    # its output to /dev/null: a broken pipe would end it with its doctor, a real vLLM whose
    # logging swallows the EPIPE keeps serving (the orphan this is about)
    argv = ["/bin/sh", "-c", 'exec "$@" >/dev/null 2>&1', "sh", *argv]
    doc.start("--", *argv, env=env)
    first = _running(doc)
    doc.stop(signal.SIGKILL)
    assert alive(first.pid), "an orphan: the server outlives its doctor"  # type: ignore[attr-defined]
    doc.start("--", *argv, env=env)
    try:
        _running(doc, other_than=first.pid)  # type: ignore[attr-defined]
        # pid_alive: a zombie whose new parent (a container's init) never reaps it is gone
        assert not pid_alive(first.pid), "the old server was stopped"  # type: ignore[attr-defined]
    finally:
        assert doc.stop() == 0


def _inflight(state: Path) -> dict[str, object] | None:
    db = sqlite3.connect(f"file:{state / 'doctor.db'}?mode=ro", uri=True, timeout=5)
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'remediation.inflight'").fetchone()
    except sqlite3.Error:
        return None
    finally:
        db.close()
    return None if row is None else json.loads(row[0])


def _resetting() -> bool:
    """An ``npu-smi set -t reset`` process has run for a second: its confirmations were
    answered (it reads them at once) and the card is in reset."""
    for p in psutil.process_iter(["cmdline", "create_time"]):
        cmd = p.info["cmdline"] or []
        if "set" in cmd and "reset" in cmd and any("npu-smi" in c for c in cmd):
            return bool(time.time() - p.info["create_time"] > 1.0)
    return False


def test_a_doctor_killed_during_a_reset_waits_for_it_and_records_it(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host", load_seconds=0.2, reset_seconds=6.0)
    doc = Doctor(tmp_path, host, CONFIG + "command_timeout = 15\n")
    argv, env = serve(host, 5, "--max-model-len", "8192")
    doc.start("--", *argv, env=env)
    _running(doc)
    host.inject(5, "heartbeat_lost")
    poll(_resetting, 90, "the reset to be running")
    flight = _inflight(doc.state)
    assert flight is not None and flight["action"] == "reset_device", flight
    doc.stop(signal.SIGKILL)  # in the middle of the reset
    assert host.device(5)["fault"] == "heartbeat_lost", "the reset had not finished"
    killed_at = time.time()
    doc.start("--", *argv, env=env)
    try:
        inc = poll(lambda: doc.incident("device_fault", "escalated"), 90, "the escalation")
        acts = {a.name: a for a in doc.actions(inc.id)}
        assert acts["reset_device"].outcome.value == "unknown"
        assert "interrupted" in acts["reset_device"].reason
        # the device was watched until healthy or command_timeout (the simulated reset dies
        # with the doctor that ran it: then the card stays in Alarm and a human is told)
        health = acts["recover"].params["health"]
        assert f"health {health}" in acts["recover"].reason
        assert acts["recover"].outcome.value == ("ok" if health == "OK" else "failed")
        restarted = poll(
            lambda: [
                e.at
                for e in doc.read(lambda s: s.process_events(limit=1000))
                if e.state == ProcessState.STARTING and e.at > killed_at
            ],
            60,
            "the server to be started again",
        )
        assert restarted and min(restarted) >= acts["recover"].at, "no start during the reset"
        assert _inflight(doc.state) is None
    finally:
        assert doc.stop() == 0
