"""Evidence kept before a restart: /proc's view of each thread on a captured tree, a snapshot
of a live process, and retention within a count and a size."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_doctor.collectors.evidence import (
    INDEX,
    Keeper,
    capture,
    proc_threads,
    prune,
    read_index,
)

# Captured on a Linux 6.x host from a Python server stuck in a futex wait (the engine's busy
# loop) and a thread reading its socket; the formats are proc(5)'s.
STATUS = "Name:\tVLLM::EngineCor\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t14398\n"
STACK = (
    "[<0>] futex_do_wait+0x46/0x90\n[<0>] __futex_wait+0x8a/0x100\n"
    "[<0>] futex_wait+0x9a/0x150\n[<0>] do_futex+0xfd/0x250\n"
)


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    base = root / "14398"
    (base / "task").mkdir(parents=True)
    (base / "cmdline").write_bytes(b"VLLM::EngineCore\0")
    for tid, comm, wchan, stack in (
        ("14398", "VLLM::EngineCor", "futex_do_wait", STACK),
        ("14403", "input", "unix_stream_read_generic", ""),
    ):
        t = base / "task" / tid
        t.mkdir()
        (t / "status").write_text(STATUS)
        (t / "comm").write_text(comm + "\n")
        (t / "wchan").write_text(wchan)
        if stack:
            (t / "stack").write_text(stack)  # readable by root only on a real host
    return root


def test_proc_threads_names_each_thread_and_where_it_waits(proc: Path) -> None:
    text = proc_threads(14398, proc)
    lines = text.splitlines()
    assert lines[0] == "pid 14398: VLLM::EngineCore"
    assert lines[1] == "  thread 14398 (VLLM::EngineCor) S (sleeping) wchan=futex_do_wait"
    assert lines[2] == "    [<0>] futex_do_wait+0x46/0x90"
    assert "  thread 14403 (input) S (sleeping) wchan=unix_stream_read_generic" in lines


def test_a_gone_process_has_no_threads(proc: Path) -> None:
    assert proc_threads(999999, proc) == ""


@pytest.fixture
def sleeper() -> Iterator[int]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child.pid
    child.kill()
    child.wait()


async def test_a_snapshot_of_a_live_process(tmp_path: Path, sleeper: int) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"x" * 100 + b"\nthe last words\n")
    out = tmp_path / "snap"
    index = await capture(
        out,
        reason="2 canaries unanswered",
        pids=[sleeper],
        devices=[4],
        npu_smi=str(tmp_path / "missing-npu-smi"),
        log_paths=[str(log), str(tmp_path / "rotated-away.log")],
        py_spy=str(tmp_path / "missing-py-spy"),
    )
    assert index.pids == [sleeper] and index.stacks_by == "/proc"
    stacks = (out / f"stacks-{sleeper}.txt").read_text()
    assert stacks.startswith(f"pid {sleeper}: {sys.executable} -c import time")
    assert (out / "tail-0-server.log").read_bytes().endswith(b"the last words\n")
    kinds = {f.name: f.kind for f in index.files}
    assert kinds["npu-smi-health-4.txt"] == "error" and kinds["npu-smi-ecc-4.txt"] == "error"
    assert read_index(out) == index
    assert (out / INDEX).is_file()


async def test_py_spy_that_cannot_attach_falls_back_to_proc_and_says_why(
    tmp_path: Path, sleeper: int
) -> None:
    spy = tmp_path / "py-spy"
    spy.write_text(
        "#!/bin/sh\necho 'Error: Failed to find python version from target' >&2\nexit 1\n"
    )
    spy.chmod(0o755)
    out = tmp_path / "snap"
    index = await capture(out, reason="r", pids=[sleeper], npu_smi="/nonexistent", py_spy=str(spy))
    text = (out / f"stacks-{sleeper}.txt").read_text()
    assert text.startswith("py-spy dump failed: Error: Failed to find python version")
    assert index.stacks_by == "/proc"


async def test_py_spy_stacks_when_it_answers(tmp_path: Path, sleeper: int) -> None:
    spy = tmp_path / "py-spy"
    # py-spy dump's own layout (benfred/py-spy README): a header, then one block per thread
    spy.write_text(
        "#!/bin/sh\n"
        "printf 'Process %s: python -c ...\\nPython v3.11.9 (/usr/bin/python3.11)\\n\\n' \"$3\"\n"
        'printf \'Thread %s (idle): "MainThread"\\n    <module> (<string>:1)\\n\' "$3"\n'
    )
    spy.chmod(0o755)
    out = tmp_path / "snap"
    index = await capture(out, reason="r", pids=[sleeper], npu_smi="/nonexistent", py_spy=str(spy))
    assert index.stacks_by == "py-spy"
    assert f'Thread {sleeper} (idle): "MainThread"' in (out / f"stacks-{sleeper}.txt").read_text()


def _snapshot(root: Path, name: str, size: int, mtime: int) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "blob").write_bytes(b"\0" * size)
    os.utime(d, (mtime, mtime))
    return d


def test_prune_keeps_the_newest_within_count_and_size(tmp_path: Path) -> None:
    for n in range(5):
        _snapshot(tmp_path, f"s{n}", 1000, 1000 + n)
    removed = prune(tmp_path, keep=3, max_bytes=10_000)
    assert sorted(p.name for p in removed) == ["s0", "s1"]
    removed = prune(tmp_path, keep=10, max_bytes=1500)
    assert sorted(p.name for p in removed) == ["s2", "s3"]
    assert [p.name for p in tmp_path.iterdir()] == ["s4"]


def test_prune_never_removes_the_snapshot_just_taken(tmp_path: Path) -> None:
    big = _snapshot(tmp_path, "new", 5000, 2000)
    _snapshot(tmp_path, "old", 10, 1000)
    prune(tmp_path, keep=1, max_bytes=100, protect=big)
    assert [p.name for p in tmp_path.iterdir()] == ["new"]


async def test_a_crash_loop_stays_within_its_bounds(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"y" * 5000)
    now = [1000.0]
    keeper = Keeper(
        tmp_path / "diagnostics",
        keep=3,
        max_bytes=1 << 20,
        pids=list,
        devices=list,
        log_paths=lambda: [str(log)],
        npu_smi="/nonexistent",
        metrics_url=lambda: "",
        clock=lambda: now[0],
    )
    for _ in range(6):
        now[0] += 1
        await keeper.take("crash", "exited with status 1")
    left = sorted(p.name for p in (tmp_path / "diagnostics").iterdir())
    assert left == ["crash-1004", "crash-1005", "crash-1006"]
