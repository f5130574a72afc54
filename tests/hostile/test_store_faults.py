"""Issue 15, point 6: the store never takes the server down. A corrupt store is moved aside
and a fresh one started; a full disk (a small tmpfs) fails writes that are counted and
logged, while the doctor goes on supervising (it restarts a server that dies)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import ProcessState
from ascend_doctor.core.store import Store
from tests.conftest import poll
from tests.integration.test_remediation_live import doctor_for, serve


def test_a_corrupt_store_is_moved_aside_and_a_fresh_one_starts(tmp_path: Path) -> None:
    (tmp_path / "doctor.db").write_bytes(b"this is no sqlite database" * 100)
    store = Store.in_dir(tmp_path)
    assert store.incidents() == []
    store.close()
    aside = [p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name]
    assert aside and (tmp_path / aside[0]).read_bytes().startswith(b"this is no sqlite")


@pytest.mark.parametrize("command", [["status"], ["incidents"], ["status", "--json"]])
def test_reading_a_corrupt_store_is_one_line_not_a_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "doctor.db").write_bytes(b"this is no sqlite database" * 100)
    out = subprocess.run(
        [sys.executable, "-m", "ascend_doctor", *command, "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "not a readable store" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]  # a reader moves nothing


def test_a_full_store_fails_writes_with_a_count(tmp_path: Path) -> None:
    store = Store.in_dir(tmp_path)
    store._db.execute("PRAGMA max_page_count = 1")  # nothing more fits: SQLITE_FULL
    with pytest.raises(StoreError, match="full"):
        store.set_meta("x", "y" * 100000)
    with pytest.raises(StoreError):
        store.set_meta("x", "y" * 100000)
    assert store.write_errors == 2
    store.close()


@pytest.fixture
def tmpfs(tmp_path: Path) -> object:
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the file system is full. On a slow machine the doctor's
    own store (its WAL grows to SQLite's 4 MB checkpoint size) may fill the 4 MB tmpfs first,
    and then even creating the file fails: the disk is full either way."""
    try:
        with open(path, "wb") as f:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc


@pytest.mark.integration
def test_a_full_disk_does_not_stop_supervision(tmp_path: Path, tmpfs: Path) -> None:
    with doctor_for(tmp_path) as (doc, host):
        doc.state = tmpfs / "state"
        argv, env = serve(host, 3, "--max-model-len", "8192")
        doc.start("--", *argv, env=env)
        first = poll(
            lambda: (m := doc.read(lambda s: s.server())) and m.state == ProcessState.RUNNING and m,
            60,
            "the server to be healthy",
        )
        fill(tmpfs / "filler")  # the disk fills up
        poll(lambda: "store write failed" in doc.log(), 90, "a store write to fail")
        os.kill(first.pid, signal.SIGKILL)  # and then the server dies
        poll(
            lambda: "RUNNING -> EXITED" in doc.log() and doc.log().count("-> RUNNING") >= 2,
            60,
            "the doctor to start the server again on a full disk",
        )
        assert doc.proc is not None and doc.proc.poll() is None, doc.log()[-2000:]
        assert doc.stop() == 0
