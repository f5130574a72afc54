"""Lines are never lost nor doubled: rotation by rename and by copytruncate while the doctor
follows the files, with the doctor killed by SIGKILL and restarted in the middle."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascend_doctor.core.store import Store
from tests.conftest import poll, read_store

pytestmark = pytest.mark.integration

CONFIG = """
[collectors.npu_smi]
enabled = false
[collectors.vllm]
enabled = false
[logs]
poll_interval = 0.1
"""
# Real log lines carry timestamps, so the first bytes of two generations of a file differ:
# that is what tells a copytruncate copy from a new file.
BENIGN = (
    "(APIServer pid=72{i}) INFO 09-08 {t} [loggers.py:123] Engine 000: Avg prompt throughput:"
    " 1523.4 tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.2%\n"
)
ERROR = "[rank0]: RuntimeError: NPU out of memory. Tried to allocate 1024.00 MiB id={}\n"
FILES, LINES, ERRORS_PER_FILE, ROTATE_AT = 3, 12_000, 40, 96 * 1024


def start(state: Path, logs: Path, cfg: Path, out: Path) -> subprocess.Popen[bytes]:
    with out.open("ab") as sink:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ascend_doctor",
                "watch",
                "--config",
                str(cfg),
                "--state-dir",
                str(state),
                "--log",
                str(logs / "*.log*"),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def ids(state: Path) -> list[int] | None:
    def extract(store: Store) -> list[int]:
        found = []
        for f in store.findings():
            m = re.search(r"id=(\d+)", f.finding.evidence[0].text)
            assert m, f
            found.append(int(m.group(1)))
        return found

    return read_store(state, extract)


def test_sigkill_and_rotations_lose_nothing_and_double_nothing(tmp_path: Path) -> None:
    logs, state = tmp_path / "logs", tmp_path / "state"
    logs.mkdir()
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "doctor.out"
    paths = [logs / f"app{i}.log" for i in range(FILES)]
    for p in paths:
        p.write_text("")
    doctor = start(state, logs, cfg, out)
    handles = [p.open("a") for p in paths]
    rotations = [0] * FILES
    expected: set[int] = set()
    every = LINES // ERRORS_PER_FILE
    try:
        poll(lambda: _started(state), 30, "the doctor to take its start positions")
        for n in range(LINES):
            if n == LINES // 2:
                doctor.send_signal(signal.SIGKILL)
                doctor.wait()
                doctor = start(state, logs, cfg, out)
            for i, p in enumerate(paths):
                f = handles[i]
                if n % every == every // 2:
                    ident = i * LINES + n
                    expected.add(ident)
                    f.write(ERROR.format(ident))
                else:
                    f.write(
                        BENIGN.format(
                            i=i, t=f"{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}.{n:06d}"
                        )
                    )
                f.flush()
                if f.tell() >= ROTATE_AT:
                    rotations[i] += 1
                    rotated = Path(f"{p}.{rotations[i]}")
                    if rotations[i] % 2:
                        f.close()
                        os.rename(p, rotated)  # rename + create
                        handles[i] = p.open("a")
                    else:
                        shutil.copyfile(p, rotated)  # copytruncate
                        os.truncate(p, 0)
                        f.seek(0)
        for f in handles:
            f.close()
        deadline = time.monotonic() + 60
        while len(ids(state) or []) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # a late duplicate would show up now
        found = ids(state) or []
    finally:
        for f in handles:
            f.close()
        doctor.send_signal(signal.SIGTERM)
        try:
            doctor.wait(timeout=20)
        except subprocess.TimeoutExpired:
            doctor.kill()
            doctor.wait()
    assert sum(rotations) >= 6
    assert sorted(found) == sorted(expected), (
        f"missing {sorted(expected - set(found))[:10]}, "
        f"doubled {sorted({x for x in found if found.count(x) > 1})[:10]}\n"
        + out.read_text()[-3000:]
    )


def _started(state: Path) -> bool:
    return bool(read_store(state, lambda s: s.meta("tailer.first_started_at") is not None))
