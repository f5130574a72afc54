"""Profiler outputs of the simulated host, and the fake ``msprof``.

Two producers, two layouts (FORMATS.md section 4 and 5):

- torch_npu's profiler, driven by vLLM's ``/start_profile`` and ``/stop_profile``, writes
  ``DIR/<host>_<pid>_<YYYYmmddHHMMSSmmm>_ascend_pt/ASCEND_PROFILER_OUTPUT/`` with bare CSV names;
- ``msprof --dynamic=on --pid=PID --output=DIR`` writes
  ``DIR/PROF_<n>_<ts>_<16 letters>/mindstudio_profiler_output/`` with ``_<ts>`` suffixed names.

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

from ascend_doctor.sim.state import pid_alive, read_state, state_path_from_env

DYNAMIC_KEY = "dynamic_profiling_pids"
"""Host state key: pids of fake servers started with ``PROFILING_MODE=dynamic``."""

# (name, op type, accelerator core, duration us): a decode step of a dense model.
_KERNELS = (
    ("aclnnMatmul_MatMulV2_MatMulV2", "MatMulV2", "AI_CORE", 412.6),
    ("aclnnRmsNorm_RmsNorm_RmsNorm", "RmsNorm", "AI_VECTOR_CORE", 18.4),
    ("aclnnFusedInferAttentionScore_FIA", "FusedInferAttentionScore", "MIX_AIC", 233.1),
    ("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", 9.3),
    ("aclnnSwiGlu_SwiGlu_SwiGlu", "SwiGlu", "AI_VECTOR_CORE", 27.8),
)
_SHAPES = '"1,5120;5120,5120"'
_KERNEL_HEADER = (
    "Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,"
    "Start Time(us),Duration(us),Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,"
    "Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,"
    "Output Formats,Context ID"
)
_OP_SUMMARY_HEADER = (
    "Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,"
    "Task Start Time(us),Task Duration(us),Task Wait Time(us),Block Dim,Mix Block Dim,"
    "HF32 Eligible,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
    "Output Data Types,Output Formats,Context ID"
)
_OPERATOR_HEADER = (
    "Name,Input Shapes,Call Stack,Host Self Duration(us),Host Total Duration(us),"
    "Device Self Duration(us),Device Total Duration(us),"
    "Device Self Duration With AICore(us),Device Total Duration With AICore(us)"
)
_STATISTIC_HEADER = (
    "Device_id,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),"
    "Max Time(us),Ratio(%)"
)


_Row = tuple[int, str, str, str, float, float]


def _kernel_rows(start: float, end: float) -> list[_Row]:
    """(task id, name, type, core, start us, duration us) spread over the window."""
    rows: list[_Row] = []
    t = start * 1e6
    steps = max(1, min(20, int((end - start) * 4)))
    task = 1
    for _ in range(steps):
        for name, kind, core, dur in _KERNELS:
            rows.append((task, name, kind, core, t, dur))
            t += dur + 3.2
            task += 1
    return rows


def _kernel_csv(header: str, start: float, end: float, device: int) -> str:
    lines = [header]
    for task, name, kind, core, t, dur in _kernel_rows(start, end):
        lines.append(
            f"{device},4294967295,{task},2,{name},{kind},dynamic,{core},{t:.3f}\t,{dur:.3f},"
            f'3.2,24,0,NO,{_SHAPES},FLOAT16;FLOAT16,ND;ND,"1,5120",FLOAT16,ND,N/A'
        )
    return "\n".join(lines) + "\n"


def _statistic_csv(start: float, end: float, device: int) -> str:
    stats: dict[tuple[str, str], list[float]] = {}
    for _, _, kind, core, _, dur in _kernel_rows(start, end):
        stats.setdefault((kind, core), []).append(dur)
    total = sum(sum(v) for v in stats.values())
    lines = [_STATISTIC_HEADER]
    for (kind, core), durs in sorted(stats.items(), key=lambda kv: -sum(kv[1])):
        s = sum(durs)
        lines.append(
            f"{device},{kind},{core},{len(durs)},{s:.3f},{min(durs):.3f},"
            f"{s / len(durs):.3f},{max(durs):.3f},{100 * s / total:.2f}"
        )
    return "\n".join(lines) + "\n"


def _operator_csv(start: float, end: float, device: int) -> str:
    lines = [_OPERATOR_HEADER]
    for _, _, kind, _, _, dur in _kernel_rows(start, end)[: len(_KERNELS)]:
        op = f"aten::{kind.lower()}"
        lines.append(f"{op},{_SHAPES},,{dur / 8:.3f},{dur / 6:.3f},{dur:.3f},{dur:.3f},0,0")
    return "\n".join(lines) + "\n"


def _trace(start: float, end: float, device: int, pid: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "Python"}},
        {
            "ph": "M",
            "name": "process_name",
            "pid": 2 * 10**6 + device,
            "tid": 0,
            "args": {"name": "Ascend Hardware"},
        },
    ]
    for task, name, kind, core, t, dur in _kernel_rows(start, end):
        events.append(
            {
                "name": name,
                "pid": 2 * 10**6 + device,
                "tid": 2,
                "ts": f"{t:.3f}",
                "dur": dur,
                "ph": "X",
                "args": {"Task Type": core, "Task Id": task, "OP Type": kind},
            }
        )
    return events


def write_ascend_pt(root: Path, pid: int, start: float, end: float, device: int = 0) -> Path:
    """Write one torch_npu capture of ``[start, end]`` under ``root``; return its directory."""
    stamp = datetime.fromtimestamp(end).strftime("%Y%m%d%H%M%S%f")[:-3]
    top = root / f"{socket.gethostname()}_{pid}_{stamp}_ascend_pt"
    out = top / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernel_details.csv").write_text(_kernel_csv(_KERNEL_HEADER, start, end, device))
    (out / "operator_details.csv").write_text(_operator_csv(start, end, device))
    (out / "op_statistic.csv").write_text(_statistic_csv(start, end, device))
    (out / "trace_view.json").write_text(json.dumps(_trace(start, end, device, pid)))
    (top / "profiler_info.json").write_text(
        json.dumps({"config": {"common_config": {"activities": ["CPU", "NPU"]}}, "start_info": {}})
    )
    return top


def write_prof(root: Path, pid: int, start: float, end: float, device: int = 0) -> Path:
    """Write one msprof capture of ``[start, end]`` under ``root``; return its directory."""
    stamp = datetime.fromtimestamp(end).strftime("%Y%m%d%H%M%S")
    ms = datetime.fromtimestamp(end).strftime("%Y%m%d%H%M%S%f")[:-3]
    tag = "".join(random.choices(string.ascii_uppercase, k=16))
    n = len(list(root.glob("PROF_*"))) + 1
    top = root / f"PROF_{n:06d}_{ms}_{tag}"
    out = top / "mindstudio_profiler_output"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"msprof_{stamp}.json").write_text(json.dumps(_trace(start, end, device, pid)))
    (out / f"op_summary_{stamp}.csv").write_text(
        _kernel_csv(_OP_SUMMARY_HEADER, start, end, device)
    )
    (out / f"op_statistic_{stamp}.csv").write_text(_statistic_csv(start, end, device))
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
