"""Benchmark 3: rotation torture. Are error lines lost or reported twice?

Phase 1: ``--files`` (5) files of ``--lines`` (200,000) lines each are written at
``--rate`` lines/s in total; each file is rotated every ``--rotate-kb`` (256 KB), in turn
by rename (``f`` -> ``f.N``, then a new ``f``) and by copytruncate (``f`` copied to ``f.N``,
then truncated in place while the writer keeps it open in append mode). Exactly
``--errors`` (1,000) error lines with unique ids are spread through them. The doctor
follows ``DIR/*.log*`` (rotated files too); it is killed with SIGKILL once, after
``--kill-at`` (40%) of the lines, and restarted with the same state dir ``--restart-delay``
(1 s) later while the writer keeps writing. When the writer is done and the findings
count has stopped growing, the ids found are counted. Goal: every id exactly once.

Phase 2 (``--burst``, on by default): ``--burst-lines`` (1,000,000) lines written into one
file as fast as possible, renamed away in the middle, with ``--burst-errors`` (100) error
lines. Goal: every id exactly once.

Prints the figures of each phase (and the doctor's log when an id is lost or doubled);
exit status 0 when every goal is met, else 1.

    python bench/rotation.py [--lines 200000] [--rate 20000] [--no-burst] [--keep]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import psutil
from common import (
    ERROR,
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

# Every line starts with its own timestamp, as real logs do: the heads of two files differ.
BENIGN = [
    "(APIServer pid=728) INFO 09-08 {h:02d}:{m:02d}:{s:02d}.{u:06d} [loggers.py:123] Engine 000:"
    " Avg prompt throughput: 1523.4 tokens/s, Avg generation throughput: 812.0 tokens/s,"
    " Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 63.0%\n",
    "(APIServer pid=728) INFO 09-08 {h:02d}:{m:02d}:{s:02d}.{u:06d} [launcher.py:29] 127.0.0.1:"
    '{n} - "POST /v1/completions HTTP/1.1" 200 OK\n',
    "(EngineCore_DP0 pid=276) INFO 09-08 {h:02d}:{m:02d}:{s:02d}.{u:06d} [core.py:{n}] Scheduler"
    " step finished in 23.1 ms, batch size 12\n",
]
TICK = 0.01  # seconds between write batches of phase 1


def line(k: int, error_id: int | None) -> bytes:
    """Line ``k`` of a run: the error line of ``error_id``, or a benign line."""
    if error_id is not None:
        return ERROR.format(id=error_id).encode()
    s, u = divmod(k, 1000)
    return (
        BENIGN[k % len(BENIGN)]
        .format(h=(s // 3600) % 24, m=(s // 60) % 60, s=s % 60, u=u * 1000, n=10_000 + k % 50_000)
        .encode()
    )


def spread(total: int, errors: int, seed: int) -> dict[int, int]:
    """Line index -> error id, ``errors`` lines spread at random over ``total``."""
    if errors > total:
        sys.exit(f"{errors} error lines do not fit in {total} lines")
    return {k: i for i, k in enumerate(sorted(random.Random(seed).sample(range(total), errors)))}


class RotatingFile:
    """A log file written in append mode and rotated in turn by rename and copytruncate."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh: BinaryIO = path.open("ab", buffering=0)
        self.size = 0
        self.n = 0
        self.renames = 0
        self.copytruncates = 0

    def write(self, data: bytes) -> None:
        self.fh.write(data)
        self.size += len(data)

    def rotate(self, *, rename: bool | None = None) -> None:
        self.n += 1
        target = f"{self.path}.{self.n}"
        by_rename = self.n % 2 == 1 if rename is None else rename
        if by_rename:
            os.rename(self.path, target)
            self.fh.close()
            self.fh = self.path.open("ab", buffering=0)
            self.renames += 1
        else:
            shutil.copyfile(self.path, target)
            os.truncate(self.path, 0)  # the writer keeps its descriptor: O_APPEND goes on at 0
            self.copytruncates += 1
        self.size = 0

    def close(self) -> None:
        self.fh.close()


@dataclass
class Doctor:
    """``ascend-doctor watch`` on one state dir, started again as often as asked."""

    tmp: Path
    state: Path
    globs: list[str]
    err_path: Path
    starts: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        with self.err_path.open("ab") as err:
            self.proc = start_doctor(self.tmp, self.state, self.globs, err)
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no last checkpoint."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not stop within 15 s."""
        if self.proc is not None:
            stop_doctor(self.proc)

    def cpu_seconds(self) -> float:
        if self.proc is None:
            return 0.0
        try:
            t = psutil.Process(self.proc.pid).cpu_times()
        except psutil.Error:
            return 0.0
        return float(t.user + t.system)

    def wait_ready(self, probe: Path, timeout: float = 60.0) -> float:
        """Append probe lines until one is stored: the doctor is past its first pass."""
        assert self.proc is not None
        return wait_ready(
            probe,
            self.state,
            self.proc,
            timeout,
            exited=lambda: "the doctor exited during start-up:\n" + self.tail(),
        )

    def findings(self) -> list[dict[str, Any]] | None:
        """Stored findings; None while the store is being created or is busy."""
        return read_findings(self.state)

    def settle(self, quiet: float, timeout: float) -> tuple[list[dict[str, Any]], float]:
        """Findings once their count stopped growing and the doctor went idle for ``quiet``
        seconds (or at ``timeout``); and the seconds that took."""
        t0 = last_change = time.monotonic()
        count = -1
        found: list[dict[str, Any]] = []
        cpu, at = self.cpu_seconds(), t0
        while time.monotonic() - t0 < timeout:
            time.sleep(0.5)
            now = time.monotonic()
            found = self.findings() or found
            cpu_now = self.cpu_seconds()
            busy = (cpu_now - cpu) / (now - at) > 0.25  # still reading a backlog
            cpu, at = cpu_now, now
            if len(found) != count or busy:
                count, last_change = len(found), now
            elif now - last_change >= quiet:
                return found, last_change - t0
        print(f"  (findings still changing after {timeout:g}s: counted what is there)")
        return found, timeout

    def tail(self, lines: int = 25) -> str:
        try:
            return tail(self.err_path, lines)
        except OSError:
            return ""

    def digest(self, top: int = 10) -> str:
        """The doctor's log messages by kind (numbers and paths elided), most frequent first."""
        try:
            text = self.err_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        kinds: Counter[str] = Counter()
        for ln in text:
            msg = re.sub(r"^\S+ \S+ ascend-doctor ", "", ln)
            msg = re.sub(r"/\S+", "PATH", msg)
            kinds[re.sub(r"\d+", "N", msg)[:140]] += 1
        return "\n".join(f"  {n:6d} x {k}" for k, n in kinds.most_common(top))


@dataclass
class Result:
    expected: int
    ids: Counter[int]
    findings: int
    where: dict[int, int]
    """Error id -> the index of its line in the run."""

    @property
    def missing(self) -> list[int]:
        return sorted(set(range(self.expected)) - set(self.ids))

    @property
    def duplicates(self) -> int:
        return sum(c - 1 for c in self.ids.values() if c > 1)

    @property
    def ok(self) -> bool:
        return (
            not self.missing and not self.duplicates and set(self.ids) <= set(range(self.expected))
        )

    def report(self) -> None:
        doubled = sum(1 for c in self.ids.values() if c > 1)
        print(
            f"  findings: {self.findings} of {self.expected} expected; {len(self.ids)} distinct"
            f" ids, {len(self.missing)} missing, {self.duplicates} duplicate findings"
            f" ({doubled} ids found more than once)"
        )
        if self.missing:
            print(f"  missing ids, by where they were written: {self._runs(self.missing)}")
        doubled_ids = sorted(i for i, c in self.ids.items() if c > 1)
        if doubled_ids:
            print(f"  doubled ids, by where they were written: {self._runs(doubled_ids)}")
        print(
            f"  goal (each of {self.expected} found exactly once): {'met' if self.ok else 'MISSED'}"
        )

    def _runs(self, ids: list[int], most: int = 8) -> str:
        """Consecutive ids as line ranges: ``lines 40,102-58,377 (85 ids)``."""
        runs: list[list[int]] = []
        for i in ids:
            if runs and i == runs[-1][-1] + 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        text = [
            f"lines {self.where[r[0]]:,}-{self.where[r[-1]]:,} ({len(r)} ids)"
            if len(r) > 1
            else f"line {self.where[r[0]]:,} (id {r[0]})"
            for r in runs[:most]
        ]
        return ", ".join(text) + (f", ... ({len(runs)} runs)" if len(runs) > most else "")


def count(findings: list[dict[str, Any]], errors: dict[int, int]) -> Result:
    ids: Counter[int] = Counter()
    n = 0
    for x in findings:
        i = finding_id(x)
        if i is not None:  # not a probe
            ids[i] += 1
            n += 1
    return Result(len(errors), ids, n, {i: k for k, i in errors.items()})


def verdict(doctor: Doctor, found: list[dict[str, Any]], errors: dict[int, int]) -> bool:
    """Counts and prints the ids found; with the doctor's log when one is lost or doubled."""
    result = count(found, errors)
    result.report()
    if not result.ok:
        print("  doctor log, by kind:\n" + doctor.digest())
        print("  doctor log, tail:\n" + doctor.tail())
    return result.ok


def torture(args: argparse.Namespace, tmp: Path) -> bool:
    d = tmp / "torture"
    d.mkdir()
    doctor = Doctor(tmp, tmp / "state-torture", [str(d / "*.log*")], tmp / "torture.stderr")
    total = args.files * args.lines
    errors = spread(total, args.errors, args.seed)
    kill_at = int(args.kill_at * total) if args.kill_at > 0 else total + 1  # 0: no kill
    rotate_bytes = args.rotate_kb * 1024
    print(
        f"phase 1: {args.files} files x {args.lines:,} lines at {args.rate:,.0f} lines/s,"
        f" rotated every {args.rotate_kb} KB (rename / copytruncate in turn),"
        f" {args.errors} error lines; "
        + (f"SIGKILL after {kill_at:,} lines" if kill_at <= total else "no SIGKILL")
    )
    files: list[RotatingFile] = []
    try:
        doctor.start()
        doctor.wait_ready(d / "probe.log")
        files = [RotatingFile(d / f"app-{i}.log") for i in range(args.files)]
        t0 = time.monotonic()
        k = 0
        killed_at = restarted_at = 0.0
        written = 0
        while k < total:
            due = min(total, int(args.rate * (time.monotonic() - t0)), k + 10_000)
            if due > k:
                batches: list[list[bytes]] = [[] for _ in files]
                for j in range(k, due):
                    batches[j % len(files)].append(line(j, errors.get(j)))
                for f, batch in zip(files, batches, strict=True):
                    if batch:
                        data = b"".join(batch)
                        f.write(data)
                        written += len(data)
                        if f.size >= rotate_bytes:
                            f.rotate()
                k = due
            now = time.monotonic()
            if not killed_at and k >= kill_at:
                doctor.kill()
                killed_at = now
                print(f"  SIGKILL at line {k:,} ({now - t0:.1f}s)")
            elif killed_at and not restarted_at and now - killed_at >= args.restart_delay:
                doctor.start()
                restarted_at = now
                print(f"  restarted at line {k:,} ({now - t0:.1f}s)")
            elif not doctor.alive() and (restarted_at or not killed_at):
                raise RuntimeError("the doctor exited by itself:\n" + doctor.tail())
            time.sleep(max(0.0, TICK - (time.monotonic() - t0) % TICK))
        if killed_at and not restarted_at:  # the writer was done before the restart was due
            time.sleep(max(0.0, killed_at + args.restart_delay - time.monotonic()))
            doctor.start()
        wall = time.monotonic() - t0
        for f in files:
            f.close()
        renames = sum(f.renames for f in files)
        copies = sum(f.copytruncates for f in files)
        print(
            f"  written: {total:,} lines, {written / 1e6:.0f} MB in {wall:.1f}s"
            f" ({total / wall:,.0f} lines/s); rotations: {renames} rename,"
            f" {copies} copytruncate"
        )
        found, waited = doctor.settle(args.quiet, args.settle_timeout)
        print(f"  findings complete, doctor idle: {waited:.1f}s after the writer finished")
    finally:
        for f in files:
            f.close()
        doctor.stop()
    return verdict(doctor, found, errors)


def burst(args: argparse.Namespace, tmp: Path) -> bool:
    d = tmp / "burst"
    d.mkdir()
    doctor = Doctor(tmp, tmp / "state-burst", [str(d / "*.log*")], tmp / "burst.stderr")
    total = args.burst_lines
    errors = spread(total, args.burst_errors, args.seed + 1)
    print(
        f"phase 2: burst of {total:,} lines into one file, renamed away after {total // 2:,},"
        f" {args.burst_errors} error lines"
    )
    try:
        doctor.start()
        doctor.wait_ready(d / "probe.log")
        f = RotatingFile(d / "burst.log")
        t0 = time.monotonic()
        written = 0
        cut = total // 2
        bounds = sorted({*range(0, total, 10_000), cut, total})
        try:
            for a, b in itertools.pairwise(bounds):
                if a == cut:
                    f.rotate(rename=True)
                data = b"".join(line(j, errors.get(j)) for j in range(a, b))
                f.write(data)
                written += len(data)
        finally:
            f.close()
        wall = time.monotonic() - t0
        print(
            f"  written: {total:,} lines, {written / 1e6:.0f} MB in {wall:.1f}s"
            f" ({total / wall:,.0f} lines/s); rotations: {f.renames} rename"
        )
        found, waited = doctor.settle(args.quiet, args.settle_timeout)
        print(f"  findings complete, doctor idle: {waited:.1f}s after the writer finished")
    finally:
        doctor.stop()
    return verdict(doctor, found, errors)


def phases(args: argparse.Namespace, tmp: Path) -> bool:
    ok = torture(args, tmp)
    if args.burst:
        ok = burst(args, tmp) and ok
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=5)
    ap.add_argument("--lines", type=int, default=200_000, help="lines per file")
    ap.add_argument("--rate", type=float, default=20_000, help="lines/s over all files")
    ap.add_argument("--rotate-kb", type=int, default=256)
    ap.add_argument("--errors", type=int, default=1000, help="error lines over all files")
    ap.add_argument(
        "--kill-at", type=float, default=0.4, help="SIGKILL after this share of lines (0: never)"
    )
    ap.add_argument("--restart-delay", type=float, default=1.0)
    ap.add_argument("--burst", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--burst-lines", type=int, default=1_000_000)
    ap.add_argument("--burst-errors", type=int, default=100)
    ap.add_argument("--quiet", type=float, default=5.0, help="settled: no change for this long")
    ap.add_argument("--settle-timeout", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, stores)")
    args = ap.parse_args()
    catch_signals()
    self_check(b"".join(line(k, None) for k in range(0, 3_000_000, 997)))
    t0 = time.monotonic()
    ok = run_in_tmp("ad-rotation-", args.keep, lambda tmp: phases(args, tmp))
    print(f"{'all goals met' if ok else 'goal MISSED'} ({time.monotonic() - t0:.0f}s)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
