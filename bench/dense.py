"""Benchmark (issue 18): a failure-dense log against a benign one of the same size.

A crash-looping server's log is mostly failures. This writes a 40,000-line log where every
other line is a real failure line from the development corpus (``tests/corpus/dev``, single
lines of the server's stream), and a benign log of the same number of bytes (vLLM stats,
access, HCCL and runtime INFO lines, as ``throughput.py`` writes). Then, in the same run,
it times the whole process ``ascend-doctor rules scan --json FILE`` on each (the median of
``--runs``) and prints both times and their ratio.

Goal: the dense log in <= 2 s and <= 3 x the benign one (cost linear in bytes, whatever the
failure density).

    python bench/dense.py [--lines 40000] [--runs 3] [--keep DIR] [-- RULES-SCAN-ARGS]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import SCAN_BENIGN

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "tests" / "corpus" / "dev" / "failures.jsonl"


def failure_lines() -> list[str]:
    """Single failure lines of the server's stream from the development corpus."""
    out = []
    for raw in DEV.read_text(encoding="utf-8").splitlines():
        entry = json.loads(raw)
        text = entry["text"]
        if "\n" not in text and entry.get("source_kind", "server") == "server":
            out.append(text)
    return out


def benign_line(rng: random.Random, i: int) -> str:
    """One benign line."""
    tpl = SCAN_BENIGN[rng.randrange(len(SCAN_BENIGN))]
    return tpl.format(s=i % 60, n=rng.randrange(10_000, 60_000))


def write_dense(path: Path, lines: int, seed: int = 18) -> int:
    """``lines`` lines, every other one a failure; returns the size in bytes."""
    rng = random.Random(seed)
    failures = failure_lines()
    out = [
        benign_line(rng, i) if i % 2 == 0 else failures[rng.randrange(len(failures))]
        for i in range(lines)
    ]
    data = ("\n".join(out) + "\n").encode("utf-8")
    path.write_bytes(data)
    return len(data)


def write_benign(path: Path, size: int, seed: int = 18) -> int:
    """Benign lines up to ``size`` bytes (whole lines); returns the size written."""
    rng = random.Random(seed)
    out: list[bytes] = []
    written, i = 0, 0
    while written < size:
        line = (benign_line(rng, i) + "\n").encode("utf-8")
        out.append(line)
        written += len(line)
        i += 1
    path.write_bytes(b"".join(out))
    return written


def doctor() -> list[str]:
    """The installed ``ascend-doctor`` next to this Python, else ``python -m``."""
    exe = Path(sys.executable).with_name("ascend-doctor")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ascend_doctor"]


def time_scan(path: Path, runs: int, extra: tuple[str, ...] = ()) -> tuple[float, float, int]:
    """Median wall and CPU time (user + system, workers included) of the whole process
    ``rules scan --json FILE``, and its findings."""
    times, cpu, findings = [], [], 0
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [*doctor(), "rules", "scan", "--json", *extra, str(path)],
            capture_output=True,
            check=False,
        )
        times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            sys.exit(f"rules scan failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
        findings = proc.stdout.count(b"\n")
    return statistics.median(times), statistics.median(cpu), findings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=40_000)
    ap.add_argument("--runs", type=int, default=3, help="runs of each; the median is reported")
    ap.add_argument("--keep", type=Path, help="write the logs here and keep them")
    ap.add_argument("extra", nargs="*", help="more arguments for rules scan (e.g. -- -j 1)")
    args = ap.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="dense-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        dense, benign = tmp / "dense.log", tmp / "benign.log"
        size = write_dense(dense, args.lines)
        write_benign(benign, size)
        t_benign, c_benign, n_benign = time_scan(benign, args.runs, tuple(args.extra))
        t_dense, c_dense, n_dense = time_scan(dense, args.runs, tuple(args.extra))
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    ratio = t_dense / t_benign
    mb = size / (1 << 20)
    print(f"logs: {args.lines:,} lines dense, {mb:.1f} MB each; median of {args.runs} runs")
    print(f"benign: {t_benign:6.2f} s  cpu {c_benign:6.2f} s  ({n_benign} findings)")
    print(
        f"dense : {t_dense:6.2f} s  cpu {c_dense:6.2f} s  ({n_dense} findings)  ratio {ratio:.2f}"
        f"  (cpu ratio {c_dense / c_benign:.2f})"
    )
    met = t_dense <= 2.0 and ratio <= 3.0
    print(f"goal dense <= 2 s and ratio <= 3: {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
