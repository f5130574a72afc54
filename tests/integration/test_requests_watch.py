"""A real ``ascend-doctor watch`` carries out the requests the TUI adds to its store."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_doctor.core.store import Request, Store
from tests.conftest import poll, read_store

pytestmark = pytest.mark.integration

CONFIG = """
[collectors.npu_smi]
enabled = false
[logs]
poll_interval = 0.2
cann = false
[remediation]
mode = "suggest"
"""
OOM = "[rank0]: RuntimeError: NPU out of memory. Tried to allocate 1024.00 MiB\n"


def finished(store: Store) -> list[Request] | None:
    done = [r for r in store.requests() if r.state != "pending"]
    return done if len(done) == 2 else None


def test_watch_carries_out_ack_and_next_step_requests(tmp_path: Path) -> None:
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(CONFIG)
    log = tmp_path / "server.log"
    log.write_text("starting\n")
    state = tmp_path / "state"
    cmd = [sys.executable, "-m", "ascend_doctor", "watch", "--config", str(cfg)]
    cmd += ["--state-dir", str(state), "--log", str(log)]
    with open(tmp_path / "doctor.out", "wb") as out:
        doctor = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        poll(lambda: read_store(state, lambda s: s.doctor()), 60, "the doctor to start")
        with log.open("a") as fh:
            fh.write(OOM)
        incident = poll(
            lambda: read_store(state, lambda s: [i.id for i in s.incidents()]), 60, "the incident"
        )[0]
        store = Store.in_dir(state)  # what the TUI does to ask
        store.add_request("ack", incident, {"from": "tui"})
        store.add_request("next_step", incident, {"from": "tui"})
        store.close()
        done = poll(lambda: read_store(state, finished), 60, "both requests carried out")
        ack, step = done
        assert (ack.kind, ack.state) == ("ack", "done")
        assert step.kind == "next_step" and step.state == "done"
        assert "set_env suggested" in step.result  # the policy decided: suggest mode
        assert read_store(state, lambda s: s.incident(incident).acknowledged)
    finally:
        doctor.send_signal(signal.SIGTERM)
        doctor.wait(timeout=30)
