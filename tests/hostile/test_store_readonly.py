"""Issue 15, point 6: a store that cannot be written at start-up never stops start-up. The
state dir lies on a small tmpfs remounted read-only (as a file system is after errors; chmod
would not stop root): ``watch`` starts, supervises the server with its store in memory
(seeded from the file: what a dead doctor left), counts what it could not save and writes it
all back once the mount is writable again. An immutable store file (``chattr +i``) is the
same case on a writable dir."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_doctor.core.store import Store
from ascend_doctor.core.store_base import RETRY_S
from tests.conftest import poll
from tests.integration.test_remediation_live import doctor_for, serve


def _mount(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["mount", *args], capture_output=True, check=False)


@pytest.fixture
def remountable(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs the test may remount read-only and back (root and mount(8) needed)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    done = _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        _mount("-o", "remount,rw", str(mnt))
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _remount(mnt: Path, mode: str) -> None:
    done = _mount("-o", f"remount,{mode}", str(mnt))
    assert done.returncode == 0, done.stderr.decode()


def test_a_read_only_store_runs_in_memory_and_is_written_back(remountable: Path) -> None:
    state = remountable / "state"
    store = Store.in_dir(state, lock=True)
    store.set_meta("before", "kept")
    store.close()
    _remount(remountable, "ro")
    now = [1000.0]
    store = Store.in_dir(state, lock=True)  # no StoreError: start-up goes on
    store.clock = lambda: now[0]
    assert "Read-only file system" in store.degraded
    assert store.meta("before") == "kept"  # seeded from the file
    store.set_meta("during", 1)
    store.set_meta("during", 2)
    assert store.write_errors == 2 and store.degraded  # counted, not saved
    _remount(remountable, "rw")
    store.set_meta("during", 3)  # too soon after the last try: still in memory
    assert store.degraded
    now[0] += RETRY_S
    store.set_meta("after", "saved")
    assert not store.degraded
    store.set_meta("after", "on disk")  # an ordinary write from here on
    store.close()
    reader = Store.in_dir(state, readonly=True)
    assert [reader.meta(k) for k in ("before", "during", "after")] == ["kept", 3, "on disk"]
    reader.close()
    assert (state / "doctor.db").stat().st_mode & 0o777 == 0o600


def test_a_state_dir_with_no_store_on_a_read_only_mount_still_starts(remountable: Path) -> None:
    state = remountable / "state"
    state.mkdir(mode=0o700)
    _remount(remountable, "ro")
    store = Store.in_dir(state, lock=True)
    assert store.degraded and store.incidents() == []
    store.close()


@pytest.mark.integration
def test_watch_supervises_on_a_read_only_state_dir(tmp_path: Path, remountable: Path) -> None:
    with doctor_for(tmp_path) as (doc, host):
        doc.state = remountable / "state"
        Store.in_dir(doc.state, lock=True).close()  # a doctor ran here before
        _remount(remountable, "ro")
        argv, env = serve(host, 3, "--max-model-len", "8192")
        doc.start("--", *argv, env=env)
        poll(lambda: "-> RUNNING" in doc.log(), 60, "the server to be healthy")
        loud = [line for line in doc.log().splitlines() if "cannot be written" in line]
        assert loud and "CRITICAL" in loud[0], doc.log()[-3000:]
        assert doc.proc is not None
        port = argv[argv.index("--port") + 1]
        pid = poll(lambda: _server_pid(doc.proc.pid, port), 10, "the server's pid")
        os.kill(pid, signal.SIGKILL)  # the server dies: supervision goes on
        poll(
            lambda: doc.log().count("-> RUNNING") >= 2,
            60,
            "the doctor to start the server again on a read-only store",
        )
        _remount(remountable, "rw")
        doctor = poll(lambda: doc.read(lambda s: s.doctor()), 60, "the store written back")
        assert doctor.pid == doc.proc.pid
        assert "can be written again" in doc.log()
        assert doc.stop() == 0


def _server_pid(doctor_pid: int, port: str) -> int | None:
    """The doctor's child serving on ``port`` (its store cannot be read meanwhile)."""
    for child in Path(f"/proc/{doctor_pid}/task/{doctor_pid}/children").read_text().split():
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if port.encode() in argv:
            return int(child)
    return None


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Path]:
    """A store file made immutable (``chattr +i``: even root cannot write it)."""
    state = tmp_path / "state"
    store = Store.in_dir(state, lock=True)
    store.set_meta("before", "kept")
    store.close()
    db = state / "doctor.db"
    done = subprocess.run(["chattr", "+i", str(db)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot make a file immutable here: {done.stderr.decode().strip()}")
    try:
        yield db
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=False)


def test_an_immutable_store_file_runs_in_memory_until_it_is_writable(immutable: Path) -> None:
    now = [0.0]
    store = Store.in_dir(immutable.parent, lock=True)
    store.clock = lambda: now[0]
    assert "Operation not permitted" in store.degraded and store.meta("before") == "kept"
    store.set_meta("during", 1)
    now[0] += RETRY_S
    store.set_meta("during", 2)  # still immutable: tried, still in memory
    assert store.degraded and store.write_errors == 2
    subprocess.run(["chattr", "-i", str(immutable)], check=True)
    now[0] += RETRY_S
    store.set_meta("after", 3)
    assert not store.degraded
    store.close()
    reader = Store.in_dir(immutable.parent, readonly=True)
    assert [reader.meta(k) for k in ("before", "during", "after")] == ["kept", 2, 3]
    reader.close()
