"""Remediation with its brakes on, against the simulator through the real CLI: a crash loop
that no step fixes, a doctor killed in the middle of a plan, dry-run and suggest modes that
must not touch the server, and attach mode beside a server the doctor does not own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ascend_doctor.cli.demo import free_port
from ascend_doctor.core.events import ProcessState
from ascend_doctor.core.store import Store
from ascend_doctor.sim.host import SimHost
from tests.conftest import alive, poll, read_store

pytestmark = pytest.mark.integration

CONFIG = """
[server]
start_timeout = 60
backoff_initial = 0.2
backoff_max = 1.0
health_interval = 0.1
probe_interval = 0.5
stop_grace = 5
echo = false

[collectors.npu_smi]
interval = 1.0

[collectors.vllm]
interval = 0.5

[remediation]
settle_seconds = 1.0
reset_settle = 0.2
allow_device_reset = true
"""


class Doctor:
    """One ``ascend-doctor watch`` process against the simulated host."""

    def __init__(self, tmp_path: Path, host: SimHost, config: str = CONFIG) -> None:
        self.tmp, self.host = tmp_path, host
        self.state = tmp_path / "state"
        self.cfg = tmp_path / "doctor.toml"
        self.cfg.write_text(config)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *args: str, env: dict[str, str] | None = None) -> None:
        cmd = [
            sys.executable,
            "-m",
            "ascend_doctor",
            "watch",
            "--config",
            str(self.cfg),
            "--state-dir",
            str(self.state),
            *args,
        ]
        full_env = {**os.environ, **self.host.env(), **(env or {})}
        with open(self.tmp / "doctor.out", "ab") as out:
            self.proc = subprocess.Popen(cmd, env=full_env, stdout=out, stderr=subprocess.STDOUT)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def read(self, fn: Any) -> Any:
        return read_store(self.state, fn)

    def incident(self, category: str, state: str | None = None) -> Any:
        def find(s: Store) -> Any:
            found = [i for i in s.incidents() if i.category.value == category]
            return next((i for i in found if state is None or i.state.value == state), None)

        return self.read(find)

    def actions(self, incident_id: int) -> list[Any]:
        return list(self.read(lambda s: s.actions(incident_id)) or [])

    def starts(self) -> int:
        events = self.read(lambda s: s.process_events(limit=1000)) or []
        return sum(1 for e in events if e.state == ProcessState.STARTING)

    def log(self) -> str:
        return (self.tmp / "doctor.out").read_text(errors="replace")


@contextmanager
def doctor_for(tmp_path: Path, config: str = CONFIG) -> Iterator[tuple[Doctor, SimHost]]:
    host = SimHost.create(tmp_path / "host", load_seconds=0.2)
    doc = Doctor(tmp_path, host, config)
    try:
        yield doc, host
    finally:
        if doc.proc is not None and doc.proc.poll() is None:
            doc.stop()


def serve(host: SimHost, device: int, *flags: str) -> tuple[list[str], dict[str, str]]:
    port = free_port()
    argv = host.serve_argv(
        "Qwen/Qwen2.5-7B-Instruct", ["--host", "127.0.0.1", "--port", str(port), *flags]
    )
    return argv, {"ASCEND_RT_VISIBLE_DEVICES": str(device)}


def test_crash_loop_escalates_and_leaves_the_server_stopped(tmp_path: Path) -> None:
    with doctor_for(tmp_path) as (doc, host):
        host.set_quirk("aicore", "always")
        argv, env = serve(host, 7, "--max-model-len", "8192")
        doc.start("--", *argv, env=env)
        inc = poll(lambda: doc.incident("aicore_error", "escalated"), 60, "the escalation")
        server = poll(
            lambda: (m := doc.read(lambda s: s.server())) and m.state == ProcessState.STOPPED and m,
            30,
            "the server to be left stopped",
        )
        assert server.reason == "staying stopped"
        # one start, one restart by the only step; then stopped: the supervisor starts a
        # STOPPED server only when asked, so there can be no more
        assert doc.starts() == 2
        decisions = [(a.name, a.outcome.value, a.reason) for a in doc.actions(inc.id)]
        assert [d[:2] for d in decisions] == [
            ("collect_diagnostics", "ok"),
            ("restart", "ok"),
            ("escalate", "ok"),
        ]
        assert decisions[-1][2] == "no remediation step left"
        history = doc.read(lambda s: s.ledger().history)
        assert [e.category for e in history] == ["aicore_error"]
        assert doc.proc is not None and doc.proc.poll() is None, "the doctor keeps watching"
        assert doc.stop() == 0


def test_a_doctor_killed_mid_plan_resumes_it_with_the_budget_it_had(tmp_path: Path) -> None:
    with doctor_for(tmp_path) as (doc, host):
        host.set_quirk("aicore", "always")
        argv, env = serve(host, 7, "--max-model-len", "8192")
        doc.start("--", *argv, env=env)
        inc = poll(lambda: doc.incident("aicore_error"), 60, "the first incident")
        poll(
            lambda: any(a.name == "restart" for a in doc.actions(inc.id)),
            60,
            "the first step to act",
        )
        doc.stop(signal.SIGKILL)  # no clean shutdown: mid-plan, server possibly starting
        events = doc.read(lambda s: s.process_events(limit=1000))
        pids = [e.pid for e in events if e.pid]
        poll(lambda: not any(alive(p) for p in pids), 30, "the orphaned server to die")
        used = doc.read(lambda s: s.ledger().history)
        assert len(used) == 1

        doc.start("--", *argv, env=env)
        poll(lambda: doc.incident("aicore_error", "escalated"), 60, "the plan to finish")
        incidents = doc.read(lambda s: s.incidents())
        assert [i.id for i in incidents] == [inc.id], "the plan resumed: no fresh incident"
        names = [a.name for a in doc.actions(inc.id)]
        assert names == ["collect_diagnostics", "restart", "escalate"], names
        assert doc.read(lambda s: s.ledger().history) == used, "no fresh budget"
        assert doc.stop() == 0


@pytest.mark.parametrize("mode", ["dry-run", "suggest"])
def test_dry_run_and_suggest_change_nothing_on_the_server(tmp_path: Path, mode: str) -> None:
    config = CONFIG + ('mode = "suggest"\n' if mode == "suggest" else "")
    config = config.replace("start_timeout = 60", "start_timeout = 60\nstart_retries = 2")
    with doctor_for(tmp_path, config) as (doc, host):
        argv, env = serve(host, 3, "--max-model-len", "8192")
        doc.start(*(["--dry-run"] if mode == "dry-run" else []), "--", *argv, env=env)
        poll(
            lambda: (m := doc.read(lambda s: s.server())) and m.state == ProcessState.RUNNING,
            60,
            "the server to be healthy",
        )
        host.inject(3, "heartbeat_lost")
        inc = poll(lambda: doc.incident("device_fault"), 60, "the device fault")
        reset = poll(
            lambda: next((a for a in doc.actions(inc.id) if a.name == "reset_device"), None),
            60,
            "the reset decision",
        )
        expected = "dry_run" if mode == "dry-run" else "suggested"
        assert reset.outcome.value == expected
        assert "would reset the device" in reset.reason
        doc.stop()
        calls = [c["argv"] for c in host.npu_smi_calls()]
        assert not [c for c in calls if "set" in c], "npu-smi was asked to change something"
        assert host.device(3)["fault"] == "heartbeat_lost", "the device was not touched"
        assert doc.read(lambda s: s.overrides()) == []
        starts = [
            ln
            for ln in (doc.state / "server.log").read_text().splitlines()
            if "non-default args" in ln
        ]
        assert starts and len(set(ln.split("non-default args", 1)[1] for ln in starts)) == 1, (
            "every start of the server had the same arguments"
        )


RESTART_SCRIPT = """
import os, signal, subprocess, sys, time
pidfile, out = sys.argv[1], sys.argv[2]
argv = sys.argv[3:]
try:
    old = int(open(pidfile).read())
    os.kill(old, signal.SIGTERM)
    for _ in range(200):
        os.kill(old, 0)
        time.sleep(0.05)
except (OSError, ValueError):
    pass
with open(out, "ab") as f:
    p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
open(pidfile, "w").write(str(p.pid))
"""


def test_attach_mode_restarts_through_the_command_and_suggests_launch_changes(
    tmp_path: Path,
) -> None:
    with doctor_for(tmp_path) as (doc, host):
        host.set_quirk("hang", "once")
        port = free_port()
        flags = ["--max-model-len", "8192", "--gpu-memory-utilization", "0.92"]
        argv = host.serve_argv(
            "Qwen/Qwen2.5-14B-Instruct", ["--host", "127.0.0.1", "--port", str(port), *flags]
        )
        server_log = tmp_path / "vllm.log"
        pidfile = tmp_path / "vllm.pid"
        script = tmp_path / "restart_vllm.py"
        script.write_text(textwrap.dedent(RESTART_SCRIPT))
        env = {**os.environ, **host.env(), "ASCEND_RT_VISIBLE_DEVICES": "2"}
        restart = [sys.executable, str(script), str(pidfile), str(server_log), *argv]
        subprocess.run(restart, env=env, check=True, timeout=30)  # "systemd" starts it
        first_pid = int(pidfile.read_text())
        rules = tmp_path / "rules"
        rules.mkdir()
        (rules / "fast-hang.yaml").write_text(
            (Path(__file__).parents[2] / "sim" / "rules" / "demo-timing.yaml").read_text()
        )
        doc.cfg.write_text(CONFIG + f'\n[rules]\ndirs = ["{rules}"]\n')
        doc.start(
            "--attach",
            "--url",
            f"http://127.0.0.1:{port}",
            "--pid",
            str(first_pid),
            "--restart-command",
            " ".join(restart),
            "--log",
            str(server_log),
            env={"ASCEND_RT_VISIBLE_DEVICES": "2"},
        )
        poll(
            lambda: (m := doc.read(lambda s: s.server())) and m.state == ProcessState.RUNNING,
            60,
            "the attached server to be seen healthy",
        )
        import httpx

        # a request that never finishes: the engine hangs while /health says 200
        with pytest.raises(httpx.HTTPError):
            httpx.post(
                f"http://127.0.0.1:{port}/v1/completions",
                json={"model": "Qwen/Qwen2.5-14B-Instruct", "prompt": "hi", "max_tokens": 4},
                timeout=0.5,
            )
        inc = poll(lambda: doc.incident("server_hang", "resolved"), 90, "the hang to be cured")
        decisions = {a.name: a for a in doc.actions(inc.id)}
        assert decisions["restart"].reason == "restart through the restart command"
        assert decisions["verify"].outcome.value == "ok"
        assert "1-token completion" in decisions["verify"].reason
        new_pid = int(pidfile.read_text())
        assert new_pid != first_pid and not alive(first_pid)
        assert doc.stop() == 0
        assert alive(new_pid), "the doctor never stops a server it does not own"

        # the server now dies of NPU OOM: the launch changes are suggested, not applied
        doc.start(
            "--attach",
            "--url",
            f"http://127.0.0.1:{port}",
            "--pid",
            str(new_pid),
            "--log",
            str(server_log),
        )
        poll(
            lambda: (
                (m := doc.read(lambda s: s.server()))
                and m.state == ProcessState.RUNNING
                and m.pid == new_pid
            ),
            60,
            "the doctor to attach again",
        )
        with contextlib.suppress(httpx.HTTPError):  # it answers 500 or drops the connection
            httpx.post(
                f"http://127.0.0.1:{port}/v1/completions",
                json={"model": "Qwen/Qwen2.5-14B-Instruct", "prompt": "x " * 6000, "max_tokens": 4},
                timeout=10,
            )
        oom = poll(lambda: doc.incident("npu_oom"), 60, "the OOM incident")
        acts = poll(
            lambda: (a := doc.actions(oom.id)) and any(x.name == "restart" for x in a) and a,
            60,
            "the OOM decisions",
        )
        changes = [a.params.get("change") for a in acts if a.outcome.value == "suggested"]
        assert "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True" in changes
        assert any(c and c.startswith("--gpu-memory-utilization ") for c in changes)
        assert doc.read(lambda s: s.overrides()) == []
        assert int(pidfile.read_text()) == new_pid, "no restart without a restart command"
        assert doc.stop() == 0
        if alive(new_pid):
            os.kill(new_pid, signal.SIGTERM)
