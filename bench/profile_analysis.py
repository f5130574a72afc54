"""How long ``profile analyze`` takes on a large capture, against reading its JSON once.

    python bench/profile_analysis.py [--ranks 4] [--steps 400] [--keep]

Writes a simulated torch_npu capture of ``--ranks`` ranks with ``--steps`` decode steps each
(``sim/profile_timeline.py`` and ``sim/profile_files.py``, the same writers as the demo's),
then times ``analyze`` (no advisor) and, as the reference in the same run, one
``json.loads`` of every rank's ``trace_view.json``: the least any analysis of the timeline
must spend. Goal: analyze <= 3x the reference (it also reads the CSVs and walks the events).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ascend_doctor.collectors.profiling import analyze
from ascend_doctor.sim import profile_files as pf
from ascend_doctor.sim.profile_timeline import Slow, build

GOAL = 3.0


def write(root: Path, ranks: int, steps: int) -> int:
    """A capture of ``ranks`` ranks under ``root``; returns the bytes of its timelines."""
    timelines = build(
        list(range(ranks)), time.time() * 1e6, steps, 1400.0, Slow(rank=1, part="operator")
    )
    size = 0
    for rt in timelines:
        out = root / f"bench_{1000 + rt.rank}_20260101000000000_ascend_pt"
        (out / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        (out / f"profiler_info_{rt.rank}.json").write_text(json.dumps({"rank_id": rt.rank}))
        files = {
            "trace_view.json": pf.dump_trace(pf.trace(rt, 1000 + rt.rank, ranks == 1)),
            "kernel_details.csv": pf.kernel_rows(rt, pf.KERNEL_HEADER),
            "op_statistic.csv": pf.op_statistic(rt),
            "step_trace_time.csv": pf.step_trace_time(rt),
            "communication.json": json.dumps(pf.communication(rt)),
        }
        for name, text in files.items():
            (out / "ASCEND_PROFILER_OUTPUT" / name).write_text(text)
        size += len(files["trace_view.json"])
    return size


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    try:
        size = write(tmp, args.ranks, args.steps)
        t0 = time.perf_counter()
        for trace in tmp.glob("*/ASCEND_PROFILER_OUTPUT/trace_view.json"):
            json.loads(trace.read_text())
        reference = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = analyze(tmp, advisor=False)
        took = time.perf_counter() - t0
        ratio = took / reference
        print(
            f"capture: {args.ranks} ranks x {args.steps} steps, {size / 2**20:.1f} MiB of "
            f"timeline; slow rank found: {report.slowest.rank if report.slowest else None}"
        )
        print(
            f"json.loads of the timelines: {reference:.3f} s; analyze: {took:.3f} s; "
            f"ratio {ratio:.2f} (goal <= {GOAL})"
        )
        return 0 if ratio <= GOAL and report.slowest is not None else 1
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
