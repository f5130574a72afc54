"""Benchmark 2: detection latency, from a line appended to its finding stored, under load.

Starts ``ascend-doctor watch`` (observers only) on a temp dir whose files exist before it
starts (so it reads them from the end). A writer thread appends benign vLLM lines to
``--benign-files`` files at ``--benign-rate`` lines/s in total, in small batches on a
steady schedule; meanwhile the main thread appends one error line with a unique id
every ``--interval`` seconds to a separate file for ``--seconds``, noting ``time.time()``
at each write. At the end every stored finding is matched to its id (parsed from its
evidence) and its latency is ``finding.at - write time``. Prints count, p50, p99 and max
and the benign rate actually achieved. Goal (issue 18's): p99 <= ``--goal-ms`` (10 ms) at
``--benign-rate`` 50,000 lines/s, and every error line found exactly once. Exit status 0 when
the goal is met, else 1.

    python bench/latency.py [--seconds 30] [--benign-rate 50000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO

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

TICK = 0.01  # seconds between benign batches


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


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: p99 of 300 values is the 297th)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def run(args: argparse.Namespace, tmp: Path) -> bool:
    pool = benign_pool()
    self_check(b"".join(pool))
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
                if {finding_id(x) for x in findings} >= set(written):
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
    ids = Counter(i for i in map(finding_id, findings) if i is not None)
    first: dict[int, float] = {}
    for x in findings:
        key = finding_id(x)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="how long error lines are written")
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between error lines")
    # issue 18's goal: p99 <= 10 ms at 50,000 benign lines/s
    ap.add_argument("--benign-rate", type=float, default=50_000, help="benign lines/s in total")
    ap.add_argument("--benign-files", type=int, default=4, help="files the benign load goes to")
    ap.add_argument("--goal-ms", type=float, default=10.0, help="p99 latency goal")
    ap.add_argument("--drain", type=float, default=10.0, help="seconds to wait for stragglers")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, store)")
    args = ap.parse_args()
    catch_signals()
    ok = run_in_tmp("ad-latency-", args.keep, lambda tmp: run(args, tmp))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
