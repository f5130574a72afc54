"""Benchmark 4: the daemon's footprint (RSS and CPU) while it tails a steady trickle.

Starts ``ascend-doctor watch`` (observers only, full builtin rule pack) on ``--files``
(16) files that exist before it starts, then for ``--seconds`` (60) appends
``--rate`` (1,000) lines/s in total to them, a small batch every 100 ms, with one error
line every ``--error-every`` (5) seconds among the benign ones (after ``--idle`` (10)
seconds without writes, whose CPU is reported as a baseline). Every second the doctor
process is sampled with psutil: its RSS, and its CPU as the cpu_times (user + system)
delta over the wall-clock delta, in % of one core. Prints RSS max and mean and CPU mean
and max. Goals: RSS <= ``--goal-rss-mib`` (80 MiB) and mean CPU <= ``--goal-cpu`` (5%
of one core); the error lines must all be found too (an idle doctor would pass
otherwise). Exit status 0 when every goal is met, else 1.

    python bench/footprint.py [--seconds 60] [--files 16] [--rate 1000] [--keep]
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

import psutil

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
TICK = 0.1  # seconds between write batches
MIB = 1 << 20


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
    paths = [logs / f"server-{i:02d}.log" for i in range(args.files)]
    for p in paths:  # existing files with content: the doctor starts reading at their end
        p.write_bytes(b"".join(pool[:200]))
    state = tmp / "state"
    err_path = tmp / "doctor.stderr"
    rss: list[int] = []
    cpu: list[float] = []
    errors_written = 0
    with err_path.open("wb") as err:
        doctor = start_doctor(tmp, state, [str(logs / "*.log")], err)
        files = [p.open("ab", buffering=0) for p in paths]
        try:
            proc = psutil.Process(doctor.pid)
            ready = wait_ready(paths[0], state, doctor)
            print(f"doctor ready after {ready:.1f}s; {args.idle:g}s idle for a baseline")
            i0, ic0 = time.monotonic(), sum(proc.cpu_times()[:2])
            time.sleep(args.idle)
            idle_cpu = 100 * (sum(proc.cpu_times()[:2]) - ic0) / (time.monotonic() - i0)
            print(
                f"writing {args.rate:,.0f} lines/s to {args.files} files for {args.seconds:g}s,"
                " sampling every second"
            )
            t0 = time.monotonic()
            c0 = sum(proc.cpu_times()[:2])
            last_t, last_c = t0, c0
            lines = k = 0
            next_error = args.error_every / 2
            next_sample = 1.0
            while (elapsed := time.monotonic() - t0) < args.seconds:
                due = int(args.rate * elapsed) - lines
                if due > 0:
                    batches: list[list[bytes]] = [[] for _ in files]
                    for j in range(due):
                        batches[(k + j) % len(files)].append(pool[(k + j) % len(pool)])
                    if elapsed >= next_error:  # one benign line of this batch becomes an error
                        batches[k % len(files)][0] = ERROR.format(id=errors_written).encode()
                        errors_written += 1
                        next_error += args.error_every
                    for f, batch in zip(files, batches, strict=True):
                        if batch:
                            f.write(b"".join(batch))
                    k += due
                    lines += due
                if elapsed >= next_sample:
                    now, c = time.monotonic(), sum(proc.cpu_times()[:2])
                    rss.append(proc.memory_info().rss)
                    cpu.append(100 * (c - last_c) / (now - last_t))
                    last_t, last_c = now, c
                    next_sample += 1.0
                if doctor.poll() is not None:
                    raise RuntimeError("the doctor exited:\n" + tail(err_path))
                time.sleep(max(0.0, TICK - (time.monotonic() - t0) % TICK))
            wall = time.monotonic() - t0
            cpu_mean = 100 * (sum(proc.cpu_times()[:2]) - c0) / wall
            fds = proc.num_fds()
            threads = proc.num_threads()
            time.sleep(2)  # the last error line's finding
            findings = read_findings(state) or []
        finally:
            for f in files:
                f.close()
            stop_doctor(doctor)
    found = {int(m.group(1)) for x in findings if (m := ID.search(x["evidence"][0]["text"]))}
    missing = sorted(set(range(errors_written)) - found)
    rss_max, rss_mean = max(rss) / MIB, sum(rss) / len(rss) / MIB
    print(f"written: {lines:,} lines in {wall:.1f}s ({lines / wall:,.0f} lines/s)")
    print(f"doctor: {threads} threads, {fds} open descriptors at the end")
    print(
        f"RSS MiB : max {rss_max:.1f}  mean {rss_mean:.1f}  first {rss[0] / MIB:.1f}"
        f"  (goal max <= {args.goal_rss_mib:g})"
    )
    print(
        f"CPU %   : mean {cpu_mean:.1f}  max {max(cpu):.1f} (of one core, {len(cpu)} samples)"
        f"  (goal mean <= {args.goal_cpu:g}); idle before writing {idle_cpu:.1f}"
    )
    print(f"errors  : {errors_written} written, {errors_written - len(missing)} found")
    ok_rss, ok_cpu = rss_max <= args.goal_rss_mib, cpu_mean <= args.goal_cpu
    if missing:
        print(f"missing ids: {missing}\ndoctor stderr (tail):\n{tail(err_path)}")
    if not ok_rss:
        print(f"RSS goal missed by {rss_max - args.goal_rss_mib:.1f} MiB")
    if not ok_cpu:
        print(f"CPU goal missed by {cpu_mean - args.goal_cpu:.1f} points")
    ok = ok_rss and ok_cpu and not missing
    print(f"goal {'met' if ok else 'MISSED'}")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to write and sample")
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--rate", type=float, default=1000, help="lines/s over all files")
    ap.add_argument("--idle", type=float, default=10.0, help="idle baseline seconds first")
    ap.add_argument("--error-every", type=float, default=5.0, help="seconds between errors")
    ap.add_argument("--goal-rss-mib", type=float, default=80.0)
    ap.add_argument("--goal-cpu", type=float, default=5.0, help="%% of one core, mean")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, store)")
    args = ap.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, even if inherited ignored
    signal.signal(signal.SIGTERM, _interrupt)
    tmp = Path(tempfile.mkdtemp(prefix="ad-footprint-"))
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
