"""The kernel's voice through the systemd journal (issue 14, section 4): ``journalctl -k -o
json --follow`` on PATH (the simulated host's, sim/journalctl.py, printing entries in
journald's JSON form), its cursor kept in the store. The OOM killer's line for the server's
pid makes the host's memory the root cause of the crash; a restarted doctor goes on after the
cursor and reads no line twice."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from ascend_doctor.cli.demo import free_port
from ascend_doctor.collectors.kernel_journal import CURSOR_KEY
from ascend_doctor.collectors.kernel_log import boot_id
from ascend_doctor.sim.journalctl import append, kernel_entry
from tests.conftest import poll
from tests.integration.test_crash import MODEL, _categories, _running
from tests.integration.test_remediation_live import CONFIG, Doctor, doctor_for

pytestmark = pytest.mark.integration

JOURNAL = CONFIG + '\n[logs]\nkernel_source = "journal"\nkernel_path = "/nonexistent/kmsg"\n'


def _oom(pid: int) -> str:
    # mm/oom_kill.c __oom_kill_process, as journald stores the kernel's line
    return (
        f"Out of memory: Killed process {pid} (python3) total-vm:812345676kB, "
        "anon-rss:60123456kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:123456kB "
        "oom_score_adj:0"
    )


def test_the_journal_names_the_host_oom_and_keeps_its_cursor(tmp_path: Path) -> None:
    boot = boot_id()
    with doctor_for(tmp_path, JOURNAL) as (doc, host):
        host.install_journalctl()
        state = host.state_path
        append(
            state,
            kernel_entry("Linux version 6.8.0 (before the doctor)", seq=1, usec=10, boot=boot),
        )
        port = free_port()
        argv = host.serve_argv(MODEL, ["--host", "127.0.0.1", "--port", str(port)])
        doc.start("--", *argv, env={"ASCEND_RT_VISIBLE_DEVICES": "0"})
        pid = _running(doc)
        oom = kernel_entry(_oom(pid), seq=2, usec=81234567890, boot=boot)
        append(state, oom)
        os.kill(pid, signal.SIGKILL)
        inc = poll(lambda: doc.incident("host_oom"), 60, "the host OOM incident")
        assert str(pid) in inc.summary
        # the exit waited for the journal's line: the crash is explained, not a second incident
        assert _categories(doc) == ["host_oom"]
        poll(
            lambda: (doc.read(lambda s: s.meta(CURSOR_KEY)) or {}).get("cursor") == oom["__CURSOR"],
            30,
            "the journal's cursor in the store",
        )
        assert doc.stop() == 0

        # restarted: journalctl goes on after the cursor; the OOM line is not read again
        assert _from_journal(doc) == 1
        doc.start("--", *argv, env={"ASCEND_RT_VISIBLE_DEVICES": "0"})
        _running(doc)
        runs = [json.loads(x) for x in (state.parent / "journalctl.log").read_text().splitlines()]
        follows = [r for r in runs if "--follow" in r]
        assert follows[0][-2:] == ["--lines", "0"]  # first start: from the end
        assert follows[-1][-2:] == ["--after-cursor", oom["__CURSOR"]]
        assert all(r[:3] == ["-k", "-o", "json"] for r in runs)
        assert _categories(doc) == ["host_oom"]
        assert _from_journal(doc) == 1
        assert doc.stop() == 0


def _from_journal(doc: Doctor) -> int:
    found = doc.read(lambda s: s.findings()) or []
    return sum(1 for f in found if f.finding.path == "journalctl -k")
