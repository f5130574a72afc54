"""``ascend-doctor watch`` as an operator runs it: a real doctor process supervising the
fake server, stopped with SIGTERM, started again with what it learned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_doctor.cli.demo import free_port
from ascend_doctor.core.events import ProcessState
from ascend_doctor.sim.host import SimHost
from tests.conftest import alive, poll, read_store

pytestmark = pytest.mark.integration

CONFIG = """
[server]
start_timeout = 60
backoff_initial = 0.2
probe_interval = 0.5
stop_grace = 5
echo = false

[collectors.npu_smi]
interval = 1.0

[remediation]
settle_seconds = 1.0
"""


def test_watch_learns_survives_sigterm_and_relaunches_with_overrides(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host", load_seconds=0.2)
    state = tmp_path / "state"
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(CONFIG)
    port = free_port()
    argv = host.serve_argv(
        "Qwen/Qwen2.5-14B-Instruct",
        [
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            "32768",
            "--gpu-memory-utilization",
            "0.5",
        ],
    )
    env = {**os.environ, **host.env(), "ASCEND_RT_VISIBLE_DEVICES": "0"}
    cmd = [
        sys.executable,
        "-m",
        "ascend_doctor",
        "watch",
        "--config",
        str(cfg),
        "--state-dir",
        str(state),
        "--",
        *argv,
    ]

    out = open(tmp_path / "doctor.out", "wb")
    doctor = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        poll(
            lambda: read_store(
                state, lambda s: [i for i in s.incidents() if i.state == "resolved"]
            ),
            60,
            "the kv-cache incident to resolve",
        )
        server = read_store(state, lambda s: s.server())
        assert server.state == ProcessState.RUNNING
        pid = server.pid
        doctor.send_signal(signal.SIGTERM)
        assert doctor.wait(timeout=20) == 0
    finally:
        if doctor.poll() is None:
            doctor.kill()
        doctor.wait()
    assert not alive(pid), "the server outlived the doctor"
    events = read_store(state, lambda s: s.process_events())
    assert events[-1].state == ProcessState.STOPPED
    assert events[-1].reason == "doctor shutting down"

    # A restarted doctor relaunches with the learned --max-model-len: no new incident.
    learned = read_store(state, lambda s: {o.key: o.value for o in s.overrides()})
    assert int(learned["--max-model-len"]) < 32768

    def runs() -> int:
        return sum(
            1
            for e in read_store(state, lambda s: s.process_events())
            if e.state == ProcessState.RUNNING
        )

    runs_before = runs()
    doctor = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        poll(lambda: runs() > runs_before, 60, "the relaunched server to be healthy")
        doctor.send_signal(signal.SIGINT)
        assert doctor.wait(timeout=20) == 0
    finally:
        if doctor.poll() is None:
            doctor.kill()
        doctor.wait()
        out.close()
    assert len(read_store(state, lambda s: s.incidents())) == 1
    last_args = [
        ln for ln in (state / "server.log").read_text().splitlines() if "non-default args" in ln
    ][-1]
    assert f"'max_model_len': {learned['--max-model-len']}" in last_args
    res = subprocess.run(
        [sys.executable, "-m", "ascend_doctor", "incidents", "--state-dir", str(state), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    (inc,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert inc["category"] == "kv_cache_insufficient"


def test_watch_without_command_only_observes(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_")}
    env["PATH"] = os.path.dirname(sys.executable)  # no npu-smi here: that collector turns off
    out = open(tmp_path / "doctor.out", "wb")
    doctor = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ascend_doctor",
            "watch",
            "--state-dir",
            str(state),
            "--log",
            str(logs / "*.log"),
        ],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        poll(lambda: read_store(state, lambda s: s.doctor()), 30, "the doctor to start")
        (logs / "server.log").write_text(
            "INFO 09-08 02:55:20 [worker.py:240] Available KV cache memory: 25.82 GiB\n"
            "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n"
        )
        (inc,) = poll(lambda: read_store(state, lambda s: s.incidents()), 30, "an incident")
        assert inc.category == "npu_oom"
        doctor.send_signal(signal.SIGTERM)
        assert doctor.wait(timeout=20) == 0
    finally:
        if doctor.poll() is None:
            doctor.kill()
        doctor.wait()
        out.close()
    log = (tmp_path / "doctor.out").read_text()
    assert "npu-smi not found" in log
    assert read_store(state, lambda s: s.process_events()) == []  # nothing was supervised
