"""core.procs reads /proc itself for what `status` asks (is this pid alive, when did it
start): the answers must be psutil's, which wrote the start times in the store."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from ascend_doctor.core import procs


def test_start_time_is_psutils_for_live_processes() -> None:
    for pid in (os.getpid(), os.getppid(), 1):
        assert procs.process_start(pid) == pytest.approx(psutil.Process(pid).create_time())
        assert procs.pid_alive(pid)
        assert procs.same_process(pid, psutil.Process(pid).create_time())


def test_a_zombie_is_not_alive_and_a_reaped_pid_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # poll with a deadline until it has exited and is not reaped yet (a zombie)
        proc = psutil.Process(child.pid)
        deadline = time.monotonic() + 10
        while proc.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
        assert not procs.pid_alive(child.pid)
    finally:
        child.wait()
    assert not procs.pid_alive(child.pid)
    assert procs.process_start(child.pid) is None
    assert not procs.same_process(child.pid, 0.0)


def test_a_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    # the child names itself (prctl PR_SET_NAME, as a process title library does)
    code = (
        "import ctypes,sys,time; ctypes.CDLL(None).prctl(15, b'a) b (c', 0, 0, 0); "
        "sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        assert psutil.Process(child.pid).name() == "a) b (c"
        assert procs.process_start(child.pid) == pytest.approx(
            psutil.Process(child.pid).create_time()
        )
        assert procs.pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_without_proc_psutil_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(pid: int) -> None:
        return None

    monkeypatch.setattr(procs, "_stat", unreadable)
    assert procs.process_start(os.getpid()) == pytest.approx(psutil.Process().create_time())
    assert procs.pid_alive(os.getpid())


def test_the_same_process_survives_a_boot_time_read_a_second_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # /proc/stat prints btime in whole seconds from the wall clock: after a slew another
    # process (the one that recorded the start) may have read it one second off
    recorded = procs.process_start(os.getpid())
    assert recorded is not None
    boot = procs._boot
    assert boot is not None
    for shift in (-1.0, 1.0):
        monkeypatch.setattr(procs, "_boot", boot + shift)
        assert procs.same_process(os.getpid(), recorded)
    # a start further away than the tolerance is another process
    monkeypatch.setattr(procs, "_boot", boot)
    assert not procs.same_process(os.getpid(), recorded + procs.START_TOLERANCE + 0.5)
    assert not procs.same_process(os.getpid(), recorded - procs.START_TOLERANCE - 0.5)
