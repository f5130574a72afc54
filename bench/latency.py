"""Benchmark 2: detection latency, from a line appended to its finding stored, under load.

Starts ``ascend-doctor watch`` (observers only) on a temp dir whose files exist before it
starts (so it reads them from the end). A writer thread appends benign vLLM lines to
``--benign-files`` files at ``--benign-rate`` lines/s in total, in small batches on a
steady schedule; meanwhile the main thread appends one error line with a unique id
every ``--interval`` seconds to a separate file for ``--seconds``, noting ``time.time()``
at each write. At the end every stored finding is matched to its id (parsed from its
evidence) and its latency is ``finding.at - write time``. Prints count, p50, p99 and max
and the benign rate actually achieved. Goal: p99 <= ``--goal-ms`` (50 ms) and every error
line found exactly once. Exit status 0 when the goal is met, else 1.

    python bench/latency.py [--seconds 30] [--benign-rate 10000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import LogChunk
from ascend_doctor.core.store import Store
from ascend_doctor.rules import Engine, load_rules

# Only the tailer and the rules run: no collectors, no CANN log roots (without a server
# they default to $HOME/ascend/log: not this benchmark's files), and no remediation (with
# no server to act on, an OOM plan fails in set_env; "off" records one refusal instead).
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
TICK = 0.01  # seconds between benign batches


def benign_pool(count: int = 4096) -> list[bytes]:
    """Varied benign lines, to be written round-robin."""
    return [
        BENIGN[i % len(BENIGN)].format(m=(i // 60) % 60, s=i % 60, n=10_000 + i).encode()
        for i in range(count)
    ]


def self_check(pool: list[bytes]) -> None:
    """The error line gives exactly one finding and the benign lines none (builtin pack)."""
    engine = Engine(load_rules(), clock=lambda: 0.0)
    for text, want in ((ERROR.format(id=1).encode(), 1), (b"".join(pool), 0)):
        got = len(engine.scan(LogChunk("/bench/server.log", "server", 0, text)))
        if got != want:
            sys.exit(f"self-check: expected {want} finding(s), got {got}: {text[:80]!r}")


class BenignWriter(threading.Thread):
    """Appends ``rate`` lines/s in total to ``paths``, a small batch each ``TICK``."""

    def __init__(self, paths: list[Path], rate: float, pool: list[bytes]) -> None:
        super().__init__(name="benign-writer", daemon=True)
        self.paths = paths
        self.rate = rate
        self.pool = pool
        self.lines = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        files: list[BinaryIO] = [p.open("ab", buffering=0) for p in self.paths]
        try:
            start = time.monotonic()
            k = 0
            while not self.stop.is_set():
                due = int(self.rate * (time.monotonic() - start)) - self.lines
                if due > 0:
                    share, extra = divmod(due, len(files))
                    for i, f in enumerate(files):
                        n = share + (1 if i < extra else 0)
                        if n:
                            f.write(b"".join(self.pool[(k + j) % len(self.pool)] for j in range(n)))
                            k += n
                    self.lines += due
                self.stop.wait(TICK - (time.monotonic() - start) % TICK)
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            for f in files:
                f.close()


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
        return store.findings()
    except sqlite3.Error:
        return None
    finally:
        store.close()


def wait_ready(
    probe: Path, state: Path, proc: subprocess.Popen[bytes], timeout: float = 60.0
) -> float:
    """Append probe lines until one is stored: the doctor is past its first pass."""
    t0 = time.monotonic()
    n = 0
    with probe.open("ab", buffering=0) as f:
        while time.monotonic() - t0 < timeout:
            if proc.poll() is not None:
                raise RuntimeError(f"the doctor exited with status {proc.returncode}")
            f.write(PROBE.format(id=n).encode())
            n += 1
            time.sleep(0.2)
            if any("probe=" in x["evidence"][0]["text"] for x in read_findings(state) or []):
                return time.monotonic() - t0
    raise RuntimeError(f"the doctor stored no probe finding within {timeout:g}s")


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: p99 of 300 values is the 297th)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def tail(path: Path, lines: int = 20) -> str:
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def run(args: argparse.Namespace, tmp: Path) -> bool:
    pool = benign_pool()
    self_check(pool)
    logs = tmp / "logs"
    logs.mkdir()
    benign = [logs / f"benign-{i}.log" for i in range(args.benign_files)]
    for p in benign:  # existing files with content: the doctor starts reading at their end
        p.write_bytes(b"".join(pool[:1000]))
    errors = logs / "errors.log"
    errors.touch()
    state = tmp / "state"
    err_path = tmp / "doctor.stderr"
    writer = BenignWriter(benign, args.benign_rate, pool)
    with err_path.open("wb") as err:
        doctor = start_doctor(tmp, state, [str(logs / "*.log")], err)
        try:
            writer.start()
            ready = wait_ready(errors, state, doctor)
            print(f"doctor ready after {ready:.1f}s; measuring for {args.seconds:g}s")
            written: dict[int, float] = {}
            lines0, t0 = writer.lines, time.monotonic()
            count = round(args.seconds / args.interval)
            with errors.open("ab", buffering=0) as f:
                for i in range(count):
                    time.sleep(max(0.0, t0 + i * args.interval - time.monotonic()))
                    line = ERROR.format(id=i).encode()
                    written[i] = time.time()
                    f.write(line)  # unbuffered: one write(2), in the file when it returns
            lines1, t1 = writer.lines, time.monotonic()
            # let the doctor catch up, still under load
            deadline = time.monotonic() + args.drain
            findings: list[dict[str, Any]] = []
            while time.monotonic() < deadline:
                findings = read_findings(state) or findings
                if {_id(x) for x in findings} >= set(written):
                    break
                time.sleep(0.25)
            findings = read_findings(state) or findings
        finally:
            writer.stop.set()
            writer.join()
            stop_doctor(doctor)
    if writer.error is not None:
        raise writer.error
    rate = (lines1 - lines0) / (t1 - t0)
    ids = Counter(i for i in map(_id, findings) if i is not None)
    first: dict[int, float] = {}
    for x in findings:
        key = _id(x)
        if key is not None and key in written:
            first.setdefault(key, x["at"] - written[key])
    missing = sorted(set(written) - set(ids))
    dups = sum(c - 1 for c in ids.values() if c > 1)
    lat = [v * 1000 for v in first.values()]
    print(
        f"benign load: {rate:,.0f} lines/s achieved over {t1 - t0:.1f}s"
        f" (target {args.benign_rate:,.0f}, {args.benign_files} files)"
    )
    print(
        f"error lines: {len(written)} written, {len(first)} found, {len(missing)} missing,"
        f" {dups} duplicate findings"
    )
    ok = not missing and not dups and bool(lat)
    if lat:
        p50, p99 = percentile(lat, 50), percentile(lat, 99)
        print(
            f"latency ms  : p50 {p50:.1f}  p99 {p99:.1f}  max {max(lat):.1f}"
            f"  min {min(lat):.1f}  (goal p99 <= {args.goal_ms:g})"
        )
        ok = ok and p99 <= args.goal_ms
    if rate < 0.95 * args.benign_rate:
        print("note: the benign writer fell short of its target rate")
    if missing:
        print(f"missing ids: {missing[:20]}{' ...' if len(missing) > 20 else ''}")
        print("doctor stderr (tail):\n" + tail(err_path))
    print(f"goal {'met' if ok else 'MISSED'}")
    return ok


def _id(finding: dict[str, Any]) -> int | None:
    m = ID.search(finding["evidence"][0]["text"])
    return int(m.group(1)) if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="how long error lines are written")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between error lines")
    ap.add_argument("--benign-rate", type=float, default=10_000, help="benign lines/s in total")
    ap.add_argument("--benign-files", type=int, default=4, help="files the benign load goes to")
    ap.add_argument("--goal-ms", type=float, default=50.0, help="p99 latency goal")
    ap.add_argument("--drain", type=float, default=10.0, help="seconds to wait for stragglers")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, store)")
    args = ap.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, even if inherited ignored
    signal.signal(signal.SIGTERM, _interrupt)
    tmp = Path(tempfile.mkdtemp(prefix="ad-latency-"))
    try:
        ok = run(args, tmp)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        ok = False
    except RuntimeError as exc:  # the doctor did not start or died
        print(f"error: {exc}", file=sys.stderr)
        ok = False
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
