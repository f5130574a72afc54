"""Benchmark 4: the daemon's footprint (RSS and CPU) while it tails a steady trickle.

Starts ``ascend-doctor watch`` (observers only, full builtin rule pack) on ``--files``
(16) files that exist before it starts, then for ``--seconds`` (60) appends
``--rate`` (1,000) lines/s in total to them, a small batch every 100 ms, with one error
line every ``--error-every`` (5) seconds among the benign ones (after ``--idle`` (10)
seconds without writes, whose CPU is reported as a baseline). Every second the doctor
process is sampled with psutil: its RSS, and its CPU as the cpu_times (user + system)
delta over the wall-clock delta, in % of one core. Prints RSS max and mean and CPU mean
and max. Goals (issue 18's): RSS <= ``--goal-rss-mib`` (64 MiB) and mean CPU <= ``--goal-cpu``
(3% of one core); the error lines must all be found too (an idle doctor would pass
otherwise). Exit status 0 when every goal is met, else 1.

    python bench/footprint.py [--seconds 60] [--files 16] [--rate 1000] [--keep]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psutil
from common import (
    ERROR,
    benign_pool,
    catch_signals,
    finding_id,
    read_findings,
    run_in_tmp,
    self_check,
    start_doctor,
    stop_doctor,
    tail,
    wait_ready,
)

TICK = 0.1  # seconds between write batches
MIB = 1 << 20


def run(args: argparse.Namespace, tmp: Path) -> bool:
    pool = benign_pool()
    self_check(b"".join(pool))
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
    found = {i for x in findings if (i := finding_id(x)) is not None}
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
    # issue 18's goals
    ap.add_argument("--goal-rss-mib", type=float, default=64.0)
    ap.add_argument("--goal-cpu", type=float, default=3.0, help="%% of one core, mean")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, store)")
    args = ap.parse_args()
    catch_signals()
    ok = run_in_tmp("ad-footprint-", args.keep, lambda tmp: run(args, tmp))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
