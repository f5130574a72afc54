"""Profiler outputs of the simulated host, and the fake ``msprof``.

Two producers, two layouts (FORMATS.md section 4 and 5):

- torch_npu's profiler, driven by vLLM's ``/start_profile`` and ``/stop_profile``, writes
  ``DIR/<host>_<pid>_<YYYYmmddHHMMSSmmm>_ascend_pt/ASCEND_PROFILER_OUTPUT/`` with bare CSV names;
- ``msprof --dynamic=on --pid=PID --output=DIR`` writes
  ``DIR/PROF_<n>_<ts>_<16 letters>/mindstudio_profiler_output/`` with ``_<ts>`` suffixed names.

Their content comes from one lockstep timeline of the server's ranks
(``sim/profile_timeline.py``) written out file by file (``sim/profile_files.py``), so
msprof-analyze reads it as it reads a real capture: one ``*_ascend_pt`` per rank with its
``profiler_info_{rank}.json``, step trace data and the Overlap Analysis track.

The fake ``msprof`` attaches only to a live pid that the fake server recorded in the host
state as started with ``PROFILING_MODE=dynamic``, like the real one needs that variable.
"""

from __future__ import annotations

import json
import os
import random
import socket
import string
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from ascend_doctor.sim import profile_files as pf
from ascend_doctor.sim.profile_files import GROUP
from ascend_doctor.sim.profile_timeline import RankTimeline, Slow, build, steps_for
from ascend_doctor.sim.state import pid_alive, read_state, state_path_from_env

DYNAMIC_KEY = "dynamic_profiling_pids"
"""Host state key: pids of fake servers started with ``PROFILING_MODE=dynamic``."""

_OPERATOR_HEADER = (
    "Name,Input Shapes,Call Stack,Host Self Duration(us),Host Total Duration(us),"
    "Device Self Duration(us),Device Total Duration(us),"
    "Device Self Duration With AICore(us),Device Total Duration With AICore(us)"
)
SLOW_KEY = "profile_slow"
"""Host state key: the slow part captures show, ``{"rank", "part", "factor", "operator"}``."""


def _state() -> dict[str, Any]:
    try:
        return read_state(state_path_from_env())
    except (OSError, ValueError):
        return {}


def _devices(state: dict[str, Any], pid: int, device: int) -> list[int]:
    """The devices the server holds, as the driver lists them (one rank per device)."""
    held = sorted({int(p["device"]) for p in state.get("processes", []) if p.get("pid") == pid})
    return held or [device]


def _slow(state: dict[str, Any]) -> Slow | None:
    raw = state.get(SLOW_KEY)
    if not isinstance(raw, dict):
        return None
    return Slow(
        rank=int(raw.get("rank", 0)),
        part=str(raw.get("part", "operator")),
        factor=float(raw.get("factor", 3.0)),
        operator=str(raw.get("operator", "MatMulV2")),
    )


def _timelines(
    pid: int,
    start: float,
    end: float,
    device: int,
    tokens: int | None,
    devices: list[int] | None = None,
) -> list[RankTimeline]:
    state = _state()
    devices = devices or _devices(state, pid, device)
    steps, gap = steps_for((end - start) * 1e6, tokens)
    if tokens == 0:
        steps = 0  # an idle server: the NPU ran nothing in the window
    return build(devices, start * 1e6, steps, gap, _slow(state))


def _profiler_info(rank: int, start: float, end: float) -> dict[str, Any]:
    """torch_npu ``profiler_interface._dump_profiler_info`` with vLLM-Ascend's settings."""
    return {
        "config": {
            "common_config": {
                "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                "schedule": None,
                "record_shapes": False,
                "profile_memory": False,
                "with_stack": False,
                "with_flops": False,
                "with_modules": False,
            },
            "experimental_config": {
                "_profiler_level": "Level1",
                "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION",
                "_l2_cache": False,
                "_msprof_tx": False,
                "_data_simplification": True,
                "_export_type": ["text"],
                "_op_attr": False,
                "_gc_detect_threshold": None,
            },
        },
        "start_info": {
            "syscnt_enable": True,
            "freq": 100000000,
            "start_cnt": int(start * 1e8),
            "start_monotonic": int(time.monotonic_ns() - (time.time() - start) * 1e9),
        },
        "end_info": {
            "collectionTimeEnd": int(end * 1e9),
            "MonotonicTimeEnd": time.monotonic_ns(),
        },
        "torch_npu_version": "2.7.1.post1",
        "cann_version": "8.3.RC2",
        "rank_id": rank,
    }


def _metadata(ranks: int) -> dict[str, Any]:
    return {
        "ENV_VARIABLES": {"ASCEND_GLOBAL_LOG_LEVEL": "3", "HCCL_CONNECT_TIMEOUT": "120"},
        "parallel_group_info": {
            GROUP: {
                "group_name": "default_group",
                "group_rank": 0,
                "global_ranks": list(range(ranks)),
            },
        },
    }


def _operator_csv(rt: RankTimeline) -> str:
    lines = [_OPERATOR_HEADER]
    seen: dict[str, float] = {}
    for t in rt.tasks:
        if t.core not in ("HCCL", "MEMCPY_ASYNC"):
            seen.setdefault(t.op_type, t.dur_us)
    for kind, dur in seen.items():
        lines.append(
            f'aten::{kind.lower()},"1,5120",,{dur / 8:.3f},{dur / 6:.3f},{dur:.3f},{dur:.3f},0,0'
        )
    return "\n".join(lines) + "\n"


def write_ascend_pt(
    root: Path,
    pid: int,
    start: float,
    end: float,
    device: int = 0,
    *,
    tokens: int | None = None,
    rank: int | None = None,
    devices: list[int] | None = None,
) -> Path:
    """Write torch_npu's capture of ``[start, end]`` under ``root``.

    ``tokens`` generated in the window shapes the split (None: a server under load). With
    ``rank`` and ``devices`` (a TP worker, as vLLM's workers each run their own profiler) only
    that rank's directory is written, named by the worker's ``pid``; the ranks run in lockstep
    on ``devices``. Without them, one directory per device the host state lists for ``pid``.
    A ``profile_slow`` entry in the host state slows one rank's operator or collective.
    Returns the first directory written.
    """
    stamp = datetime.fromtimestamp(start).strftime("%Y%m%d%H%M%S%f")[:-3]
    timelines = _timelines(pid, start, end, device, tokens, devices)
    world = len(timelines)
    if rank is not None:
        timelines = [rt for rt in timelines if rt.rank == rank]
    tops = []
    for rt in timelines:
        # one process per rank: a worker's own pid; else rank 0 is pid, the others stand in
        worker = pid if rank is not None else pid + rt.rank
        top = root / f"{socket.gethostname()}_{worker}_{stamp}_ascend_pt"
        out = top / "ASCEND_PROFILER_OUTPUT"
        out.mkdir(parents=True, exist_ok=True)
        files = {
            "kernel_details.csv": pf.kernel_rows(rt, pf.KERNEL_HEADER),
            "operator_details.csv": _operator_csv(rt),
            "op_statistic.csv": pf.op_statistic(rt),
            "trace_view.json": pf.dump_trace(pf.trace(rt, worker, world == 1)),
        }
        if rt.steps:
            files["step_trace_time.csv"] = pf.step_trace_time(rt)
        comm = pf.communication(rt)
        if comm:
            files["communication.json"] = json.dumps(comm)
        for name, text in files.items():
            (out / name).write_text(text)
        (top / f"profiler_info_{rt.rank}.json").write_text(
            json.dumps(_profiler_info(rt.rank, start, end), indent=4)
        )
        (top / "profiler_metadata.json").write_text(json.dumps(_metadata(world)))
        tops.append(top)
    return tops[0]


def _info_json(device: int, rank: int) -> dict[str, Any]:
    """``device_<id>/info.json.<id>``: the fields of Ascend/msprof's sample info.json."""
    return {
        "jobInfo": "NA",
        "devices": str(device),
        "DeviceInfo": [
            {
                "id": device,
                "ai_core_num": 24,
                "aic_frequency": "1800",
                "aiv_num": 48,
                "hwts_frequency": "50",
            }
        ],
        "platform_version": "5",
        "pid": "NA",
        "rank_id": rank,
    }


def write_prof(
    root: Path, pid: int, start: float, end: float, device: int = 0, *, tokens: int | None = None
) -> Path:
    """Write one msprof capture of ``[start, end]`` under ``root``; return its directory."""
    stamp = datetime.fromtimestamp(end).strftime("%Y%m%d%H%M%S")
    ms = datetime.fromtimestamp(end).strftime("%Y%m%d%H%M%S%f")[:-3]
    tag = "".join(random.choices(string.ascii_uppercase, k=16))
    n = len(list(root.glob("PROF_*"))) + 1
    top = root / f"PROF_{n:06d}_{ms}_{tag}"
    out = top / "mindstudio_profiler_output"
    out.mkdir(parents=True, exist_ok=True)
    (top / "host").mkdir(exist_ok=True)
    timelines = _timelines(pid, start, end, device, tokens)
    events: list[dict[str, Any]] = []
    summary, stats = [pf.OP_SUMMARY_HEADER], [pf.STATISTIC_HEADER]
    for rt in timelines:
        dev = top / f"device_{rt.device}"
        dev.mkdir(exist_ok=True)
        (dev / f"info.json.{rt.device}").write_text(json.dumps(_info_json(rt.device, rt.rank)))
        events += pf.trace(rt, pid, len(timelines) == 1)
        summary += pf.kernel_rows(rt, pf.OP_SUMMARY_HEADER).splitlines()[1:]
        stats += pf.op_statistic(rt).splitlines()[1:]
    (out / f"msprof_{stamp}.json").write_text(pf.dump_trace(events))
    (out / f"op_summary_{stamp}.csv").write_text("\n".join(summary) + "\n")
    (out / f"op_statistic_{stamp}.csv").write_text("\n".join(stats) + "\n")
    return top


def _dynamic_pids() -> list[int]:
    try:
        state = read_state(state_path_from_env())
    except (OSError, ValueError):
        return []
    return [int(p) for p in state.get(DYNAMIC_KEY, [])]


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _option(argv: list[str], name: str) -> str | None:
    for arg in argv:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def main(argv: list[str] | None = None) -> int:
    """``msprof --dynamic=on --pid=PID --output=DIR``: drive start/stop/quit from stdin."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _option(args, "dynamic") != "on":
        _say("[ERROR] [msprof] The simulated msprof supports only --dynamic=on --pid=PID.")
        return 1
    pid_text, output = _option(args, "pid"), _option(args, "output")
    if pid_text is None or not pid_text.isdigit():
        _say(f"[ERROR] [msprof] Argument --pid={pid_text} is invalid: expected a process id.")
        return 1
    pid = int(pid_text)
    if not pid_alive(pid):
        _say(f"[ERROR] [msprof] The process {pid} does not exist, please check --pid.")
        return 1
    if pid not in _dynamic_pids():
        _say(
            f"[ERROR] [msprof] Failed to attach to process {pid}: dynamic profiling is not "
            "enabled, start the application with PROFILING_MODE=dynamic."
        )
        return 1
    root = Path(output or os.getcwd()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    _say(f"[INFO] [msprof] Dynamic profiling attached to process {pid}.")
    _say("[INFO] [msprof] Enter 'start' to start profiling, 'stop' to stop, 'quit' to exit.")
    started: float | None = None
    sys.stdout.write("> ")
    sys.stdout.flush()
    for raw in sys.stdin:
        cmd = raw.strip()
        if cmd == "start":
            started = time.time()
            _say("[INFO] [msprof] Start profiling....")
        elif cmd == "stop":
            if started is None:
                _say("[WARNING] [msprof] Profiling is not started, enter 'start' first.")
            else:
                top = write_prof(root, pid, started, time.time())
                started = None
                _say("[INFO] [msprof] Profiling finished.")
                _say(f"[INFO] [msprof] Profiling data is saved in {top}")
        elif cmd == "quit":
            _say("[INFO] [msprof] Dynamic profiling exited.")
            return 0
        elif cmd:
            _say(f"[WARNING] [msprof] Unknown command '{cmd}', enter start, stop or quit.")
        sys.stdout.write("> ")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
