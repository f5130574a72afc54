"""Benchmark (issue 18): how long the light commands take, whole process.

Times ``ascend-doctor --version``, ``status --json`` and ``incidents --json`` (against a
state dir with an empty store) ``--runs`` times each, interleaved, with ``python -c pass``
(the interpreter's own start) as the reference of the same run, and prints each median,
with the median CPU time (user + system, which other work on the machine inflates less).

Goal: each command's median <= 200 ms.

    python bench/startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common  # noqa: F401 - the doctors started write and use their bytecode, as on a host

from ascend_doctor.core.store import Store

GOAL = 0.200


def doctor() -> list[str]:
    """The installed ``ascend-doctor`` next to this Python, else ``python -m``."""
    exe = Path(sys.executable).with_name("ascend-doctor")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ascend_doctor"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    state = Path(tempfile.mkdtemp(prefix="startup-"))
    try:
        Store.in_dir(state).close()
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "--version": [*doctor(), "--version"],
            "status --json": [*doctor(), "status", "--json", "--state-dir", str(state)],
            "incidents --json": [*doctor(), "incidents", "--json", "--state-dir", str(state)],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, cmd in commands.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                done = subprocess.run(cmd, capture_output=True, check=False)
                times[name].append(time.perf_counter() - t0)
                # status answers 3 when no doctor runs on the state dir (docs/quickstart.md);
                # anything else, or a traceback, means the figure measures an error path.
                if done.returncode not in (0, 3) or b"Traceback" in done.stderr:
                    tail = done.stderr.decode()[-500:]
                    raise SystemExit(f"{name}: exit {done.returncode}: {tail}")
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(
                    after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                )
    finally:
        shutil.rmtree(state, ignore_errors=True)
    met = True
    for name, values in times.items():
        median = statistics.median(values)
        goal = "" if name.startswith("python") else f"  goal <= {GOAL * 1000:.0f} ms"
        met = met and (name.startswith("python") or median <= GOAL)
        print(
            f"{name:18} median {median * 1000:6.0f} ms  min {min(values) * 1000:6.0f} ms"
            f"  cpu {statistics.median(cpu[name]) * 1000:5.0f} ms{goal}"
        )
    print(f"goal: {'met' if met else 'NOT met'} ({args.runs} runs each, interleaved)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
