"""What the benchmarks that drive a real ``ascend-doctor watch`` share.

The config, the error, probe and benign lines, starting and stopping the doctor, reading
its findings, waiting until it is past its first pass, and the run around a benchmark
(signals, temp dir, exit status). The scripts run as ``python bench/NAME.py`` import it as
``common``; from the project root it imports as ``bench.common`` too.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

# A user's doctor runs with its bytecode cached (pip compiles it on install, Python writes it
# on first import). An environment that forbids writing it (PYTHONDONTWRITEBYTECODE, as some
# sandboxes and CI images set) recompiles every source on every start, 30-80 ms a command:
# the doctors the benchmarks start write and use it, as on a real host.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import LogChunk
from ascend_doctor.core.store import Store
from ascend_doctor.rules import Engine, load_rules

# Only the tailer and the rules run: no collectors, no CANN log roots (without a server
# they default to $HOME/ascend/log: not this benchmark's files), and remediation off, so
# only tailing and rules are measured.
CONFIG = """\
[collectors.npu_smi]
enabled = false
[collectors.vllm]
enabled = false
[logs]
poll_interval = 0.25
cann = false
[remediation]
mode = "off"
"""
ERROR = "[rank0]: RuntimeError: NPU out of memory. Tried to allocate 1024.00 MiB id={id}\n"
PROBE = "[rank0]: RuntimeError: NPU out of memory. Tried to allocate 1024.00 MiB probe={id}\n"
BENIGN = [
    "(APIServer pid=728) INFO 09-08 02:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt"
    " throughput: 1523.4 tokens/s, Avg generation throughput: 812.0 tokens/s, Running: 12 reqs,"
    " Waiting: 0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 63.0%\n",
    '(APIServer pid=728) INFO:     127.0.0.1:{n} - "POST /v1/completions HTTP/1.1" 200 OK\n',
    "(EngineCore_DP0 pid=276) INFO 09-08 02:{m:02d}:{s:02d} [core.py:{n}] Scheduler step"
    " finished in 23.1 ms, batch size 12\n",
]
ID = re.compile(r"\bid=(\d+)")


SCAN_BENIGN = [
    "(APIServer pid=728) INFO 09-08 02:55:{s:02d} [loggers.py:123] Engine 000: Avg prompt "
    "throughput: 1523.4 tokens/s, Avg generation throughput: 812.0 tokens/s, Running: 12 reqs,"
    " Waiting: 0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 63.0%",
    '(APIServer pid=728) INFO:     127.0.0.1:{n} - "POST /v1/completions HTTP/1.1" 200 OK',
    "[INFO] HCCL(1210,python3):2026-08-14-11:02:{s:02d}.995.679 [hccl_communicator.cc:{n}]1250"
    " [HCCL_TRACE]SetTimeout: connect timeout 120 s, exec timeout 1836 s",
    "[INFO] RUNTIME(1210,python3):2026-08-14-11:02:{s:02d}.123.456 [stream.cc:{n}]1250 "
    "Create stream success, stream_id={n}",
    "(EngineCore_DP0 pid=276) INFO 09-08 02:55:{s:02d} [core.py:{n}] Scheduler step finished"
    " in 23.1 ms, batch size 12",
]
"""Benign lines of the scan benchmarks (``throughput.py``, ``dense.py``): none gives a
finding; ``{s}`` and ``{n}`` vary them."""


def benign_pool(count: int = 4096) -> list[bytes]:
    """Varied benign lines, to be written round-robin."""
    return [
        BENIGN[i % len(BENIGN)].format(m=(i // 60) % 60, s=i % 60, n=10_000 + i).encode()
        for i in range(count)
    ]


def self_check(benign: bytes) -> None:
    """The error line gives exactly one finding and the benign lines none (builtin pack)."""
    engine = Engine(load_rules(), clock=lambda: 0.0)
    for text, want in ((ERROR.format(id=1).encode(), 1), (benign, 0)):
        got = len(engine.scan(LogChunk("/bench/server.log", "server", 0, text)))
        if got != want:
            sys.exit(f"self-check: expected {want} finding(s), got {got}: {text[:80]!r}")


def finding_id(finding: dict[str, Any]) -> int | None:
    """The id of the error line a finding is about; None for a probe."""
    m = ID.search(finding["evidence"][0]["text"])
    return int(m.group(1)) if m else None


def start_doctor(
    tmp: Path, state: Path, globs: list[str], err: BinaryIO
) -> subprocess.Popen[bytes]:
    cfg = tmp / "doctor.toml"
    cfg.write_text(CONFIG)
    cmd = [sys.executable, "-m", "ascend_doctor", "watch", "--config", str(cfg)]
    cmd += ["--state-dir", str(state)]
    for g in globs:
        cmd += ["--log", g]
    # its own session: a Ctrl-C reaches only this script, which then stops it with SIGTERM
    return subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True
    )


def stop_doctor(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it does not stop within 15 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_findings(state: Path) -> list[dict[str, Any]] | None:
    """Stored findings; None while the store is being created or is busy."""
    try:
        store = Store.in_dir(state, readonly=True)
    except StoreError:
        return None
    try:
        # the store gives typed records; the benchmarks read plain fields (at, evidence text)
        return [dataclasses.asdict(row.finding) for row in store.findings()]
    except sqlite3.Error:
        return None
    finally:
        store.close()


def wait_ready(
    probe: Path,
    state: Path,
    proc: subprocess.Popen[bytes],
    timeout: float = 60.0,
    exited: Callable[[], str] | None = None,
) -> float:
    """Append probe lines until one is stored: the doctor is past its first pass.

    If the doctor exits meanwhile, a RuntimeError says so: ``exited()``, or by default
    its exit status."""
    t0 = time.monotonic()
    n = 0
    with probe.open("ab", buffering=0) as f:
        while time.monotonic() - t0 < timeout:
            if proc.poll() is not None:
                raise RuntimeError(
                    exited() if exited else f"the doctor exited with status {proc.returncode}"
                )
            f.write(PROBE.format(id=n).encode())
            n += 1
            time.sleep(0.2)
            if any("probe=" in x["evidence"][0]["text"] for x in read_findings(state) or []):
                return time.monotonic() - t0
    raise RuntimeError(f"the doctor stored no probe finding within {timeout:g}s")


def tail(path: Path, lines: int = 20) -> str:
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def catch_signals() -> None:
    """Ctrl-C (even if inherited ignored) and SIGTERM raise KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)


def run_in_tmp(prefix: str, keep: bool, body: Callable[[Path], bool]) -> bool:
    """``body(tmp)`` in a new temp dir, removed afterwards unless ``keep``; False when it
    is interrupted or raises RuntimeError (the doctor did not start or died)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        ok = body(tmp)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        ok = False
    except RuntimeError as exc:  # the doctor did not start or died
        print(f"error: {exc}", file=sys.stderr)
        ok = False
    finally:
        if keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return ok
