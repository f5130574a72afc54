"""A server killed with SIGKILL says nothing: the doctor still opens an incident
(``server_crashed``), and when the kernel's OOM killer named its pid, the host's memory is the
root cause (issue 14, section 4). The kernel's record stream is a file in the
``/dev/kmsg`` record format (Documentation/ABI/testing/dev-kmsg), written by the test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ascend_doctor.cli.demo import free_port
from ascend_doctor.core.events import ProcessState
from tests.conftest import poll
from tests.integration.test_remediation_live import CONFIG, RESTART_SCRIPT, Doctor, doctor_for

pytestmark = pytest.mark.integration

MODEL = "Qwen/Qwen2.5-14B-Instruct"


def _config(kmsg: Path) -> str:
    return CONFIG + f'\n[logs]\nkernel_source = "kmsg"\nkernel_path = "{kmsg}"\n'


def _oom_record(seq: int, pid: int) -> str:
    # mm/oom_kill.c __oom_kill_process, as /dev/kmsg gives it: prio 3, seq, usec, flags
    return (
        f"3,{seq},81234567890,-;Out of memory: Killed process {pid} (python3) "
        "total-vm:812345676kB, anon-rss:60123456kB, file-rss:0kB, shmem-rss:0kB, UID:0 "
        "pgtables:123456kB oom_score_adj:0\n"
    )


def _running(doc: Doctor, not_pid: int | None = None) -> int:
    status = poll(
        lambda: (
            (m := doc.read(lambda s: s.server()))
            and m.state == ProcessState.RUNNING
            and m.pid != not_pid
            and m
        ),
        60,
        "the server to be healthy",
    )
    return int(status.pid)


def _categories(doc: Doctor) -> list[str]:
    return [i.category.value for i in doc.read(lambda s: s.incidents()) or []]


def test_a_sigkilled_server_is_an_incident_and_an_oom_kill_names_the_host(
    tmp_path: Path,
) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,1000,-;Linux version 6.8.0 (a record from before the doctor)\n")
    with doctor_for(tmp_path, _config(kmsg)) as (doc, host):
        port = free_port()
        argv = host.serve_argv(MODEL, ["--host", "127.0.0.1", "--port", str(port)])
        doc.start("--", *argv, env={"ASCEND_RT_VISIBLE_DEVICES": "0"})
        pid = _running(doc)
        os.kill(pid, signal.SIGKILL)
        crash = poll(lambda: doc.incident("server_crashed"), 60, "the crash incident")
        assert "SIGKILL" in crash.summary and str(pid) in crash.summary
        assert _categories(doc) == ["server_crashed"]

        # the second time, the kernel says why: its OOM killer ended the server
        pid = _running(doc, not_pid=pid)
        with open(kmsg, "a") as f:
            f.write(_oom_record(2, pid))
        os.kill(pid, signal.SIGKILL)
        oom = poll(lambda: doc.incident("host_oom"), 60, "the host OOM incident")
        assert str(pid) in oom.summary
        acts = poll(lambda: doc.actions(oom.id), 60, "the host OOM decision")
        assert acts[0].name == "lower_max_num_seqs"
        assert sorted(_categories(doc)) == ["host_oom", "server_crashed"]
        assert doc.stop() == 0

        # a restarted doctor does not read the kernel's lines again (the cursor is kept)
        incidents = len(doc.read(lambda s: s.incidents()))
        doc.start("--", *argv, env={"ASCEND_RT_VISIBLE_DEVICES": "0"})
        _running(doc)
        assert len(doc.read(lambda s: s.incidents())) == incidents
        assert doc.stop() == 0


def test_an_attached_server_killed_with_sigkill_is_an_incident(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    with doctor_for(tmp_path, _config(kmsg)) as (doc, host):
        port = free_port()
        argv = host.serve_argv(MODEL, ["--host", "127.0.0.1", "--port", str(port)])
        server_log, pidfile = tmp_path / "vllm.log", tmp_path / "vllm.pid"
        script = tmp_path / "restart_vllm.py"
        script.write_text(textwrap.dedent(RESTART_SCRIPT))
        env = {**os.environ, **host.env(), "ASCEND_RT_VISIBLE_DEVICES": "1"}
        restart = [sys.executable, str(script), str(pidfile), str(server_log), *argv]
        subprocess.run(restart, env=env, check=True, timeout=30)  # "systemd" starts it
        pid = int(pidfile.read_text())
        doc.start(
            "--attach",
            "--url",
            f"http://127.0.0.1:{port}",
            "--pid",
            str(pid),
            "--log",
            str(server_log),
            env={"ASCEND_RT_VISIBLE_DEVICES": "1"},
        )
        _running(doc)
        os.kill(pid, signal.SIGKILL)
        crash = poll(lambda: doc.incident("server_crashed"), 60, "the crash incident")
        assert f"pid {pid} exited" in crash.summary
        assert _categories(doc) == ["server_crashed"]
        assert doc.stop() == 0
