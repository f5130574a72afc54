"""The files of a simulated capture, all derived from one rank's timeline.

Formats, each from the code that writes the real file:

- ``trace_view.json`` / ``msprof_*.json``: Chrome trace events, ``ts`` as a decimal string
  in us; processes named by ``process_name`` metadata (``Python``, ``CANN``, ``Ascend
  Hardware``, ``HCCL``, ``Overlap Analysis``) and tied to a device by ``process_labels``
  ``NPU`` (one card) or ``NPU <id>`` (torch_npu ``_trace_step_time_parser.py`` reads them so);
  the Overlap Analysis threads are Computing / Communication / Communication(Not
  Overlapped) / Free (the layout of Ascend/msprof-analyze's published trace_view.json);
- ``step_trace_time.csv``: torch_npu ``TraceStepTimeParser.title``, one row per device with
  an empty ``Step`` when the profiler runs without a schedule (vLLM starts and stops it);
- ``kernel_details.csv`` / ``op_summary_*.csv``: CANN's op_summary columns as torch_npu
  renames them (``_csv_headers.py``), start times followed by a tab as torch_npu writes them;
- ``op_statistic.csv``: the columns of msprof's op_statistic reference, AI Core/AI CPU only;
- ``communication.json``: ``{"step": {"collective": {op@group: {"Communication Time Info":
  ..., "Communication Bandwidth Info": ...}}, "p2p": {}}}`` (``_communication_parser.py``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from ascend_doctor.sim.profile_timeline import RankTimeline, merged, subtract

GROUP = "8803796580339245440"
"""The HCCL group id torch_npu appends to op names after ``@``."""
_COMPUTE_CORES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU")
KERNEL_HEADER = (
    "Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,"
    "Start Time(us),Duration(us),Wait Time(us),Block Num,Mix Block Num,HF32 Eligible,"
    "Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,"
    "Output Formats,Context ID"
)
OP_SUMMARY_HEADER = (
    "Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,"
    "Task Start Time(us),Task Duration(us),Task Wait Time(us),Block Num,Mix Block Num,"
    "HF32 Eligible,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
    "Output Data Types,Output Formats,Context ID"
)
STATISTIC_HEADER = (
    "Device_id,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),"
    "Max Time(us),Ratio(%)"
)
STEP_TRACE_HEADER = (
    "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,"
    "Stage,Bubble,Communication(Not Overlapped and Exclude Receive),Preparing"
)
_SHAPES = '"1,5120;5120,5120",FLOAT16;FLOAT16,ND;ND,"1,5120",FLOAT16,ND'


def overlap(rt: RankTimeline) -> dict[str, list[tuple[float, float]]]:
    """The Overlap Analysis intervals of one rank, as msprof computes them."""
    comp = merged([(t.start_us, t.end_us) for t in rt.tasks if t.core in _COMPUTE_CORES])
    comm = merged([(t.start_us, t.end_us) for t in rt.tasks if t.core == "HCCL"])
    span = [(rt.steps[0][0], rt.steps[-1][1])] if rt.steps else []
    return {
        "Computing": comp,
        "Communication": comm,
        "Communication(Not Overlapped)": subtract(comm, comp),
        "Free": subtract(subtract(span, comp), comm),
    }


def _sum(iv: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in iv)


def step_trace_time(rt: RankTimeline) -> str:
    """``step_trace_time.csv`` of one rank."""
    o = overlap(rt)
    comp, comm = _sum(o["Computing"]), _sum(o["Communication"])
    not_ov, free = _sum(o["Communication(Not Overlapped)"]), _sum(o["Free"])
    first = min((t.start_us for t in rt.tasks), default=0.0)
    prep = first - rt.steps[0][0] if rt.steps else 0.0
    stage = comp + not_ov + free
    row = [rt.device, "", comp, not_ov, comm - not_ov, comm, free, stage, 0, not_ov, prep]
    cells = [
        c if isinstance(c, str) else f"{c:.3f}" if isinstance(c, float) else str(c) for c in row
    ]
    return STEP_TRACE_HEADER + "\n" + ",".join(cells) + "\n"


def kernel_rows(rt: RankTimeline, header: str) -> str:
    """``kernel_details.csv`` (torch_npu) or ``op_summary_*.csv`` (msprof): every task."""
    lines = [header]
    for t in rt.tasks:
        if t.core == "MEMCPY_ASYNC":
            continue  # not an operator: op_summary lists AI Core, AI CPU and HCCL tasks
        if t.core == "HCCL":
            lines.append(
                f"{rt.device},4294967295,N/A,N/A,{t.name},{t.op_type},N/A,HCCL,"
                f"{t.start_us:.3f}\t,{t.dur_us:.3f},0,0,N/A,N/A,"
                "N/A,N/A,N/A,N/A,N/A,N/A,N/A"
            )
            continue
        lines.append(
            f"{rt.device},4294967295,{t.task_id},2,{t.name},{t.op_type},dynamic,{t.core},"
            f"{t.start_us:.3f}\t,{t.dur_us:.3f},{3.2:.3f},24,0,NO,{_SHAPES},N/A"
        )
    return "\n".join(lines) + "\n"


def op_statistic(rt: RankTimeline) -> str:
    """``op_statistic.csv``: AI Core and AI CPU operators by type (no HCCL, no copies)."""
    stats: dict[tuple[str, str], list[float]] = defaultdict(list)
    for t in rt.tasks:
        if t.core in _COMPUTE_CORES:
            stats[(t.op_type, t.core)].append(t.dur_us)
    total = sum(sum(v) for v in stats.values()) or 1.0
    lines = [STATISTIC_HEADER]
    for (kind, core), durs in sorted(stats.items(), key=lambda kv: -sum(kv[1])):
        s = sum(durs)
        lines.append(
            f"{rt.device},{kind},{core},{len(durs)},{s:.3f},{min(durs):.3f},"
            f"{s / len(durs):.3f},{max(durs):.3f},{100 * s / total:.2f}"
        )
    return "\n".join(lines) + "\n"


def communication(rt: RankTimeline) -> dict[str, Any]:
    """``communication.json``: each collective's time info (ms) and HCCS bandwidth."""
    ops: dict[str, Any] = {}
    for t in rt.tasks:
        if t.core != "HCCL":
            continue
        transit = (t.dur_us - t.wait_us) / 1000
        size_mb = 0.0102  # one 1x5120 fp16 activation
        ops[f"{t.name}@{GROUP}"] = {
            "Communication Time Info": {
                "Start Timestamp(us)": t.start_us,
                "Elapse Time(ms)": t.dur_us / 1000,
                "Transit Time(ms)": transit,
                "Wait Time(ms)": t.wait_us / 1000,
                "Synchronization Time(ms)": t.wait_us / 1000,
                "Idle Time(ms)": 0.0,
                "Wait Time Ratio": round(t.wait_us / max(t.dur_us, 1e-9), 4),
                "Synchronization Time Ratio": round(t.wait_us / max(t.dur_us, 1e-9), 4),
            },
            "Communication Bandwidth Info": {
                "HCCS": {
                    "Transit Size(MB)": size_mb,
                    "Transit Time(ms)": transit,
                    "Bandwidth(GB/s)": round(size_mb / transit, 4) if transit else 0,
                    "Large Packet Ratio": 0.0,
                    "Size Distribution": {str(size_mb): [1, transit]},
                },
                "SDMA": {
                    "Transit Size(MB)": size_mb,
                    "Transit Time(ms)": transit,
                    "Bandwidth(GB/s)": round(size_mb / transit, 4) if transit else 0,
                    "Large Packet Ratio": 0,
                    "Size Distribution": {},
                },
            },
        }
    return {"step": {"collective": ops, "p2p": {}}} if ops else {}


def _meta(pid: int, name: str, label: str, sort: int, threads: dict[int, str]) -> list[Any]:
    out: list[dict[str, Any]] = [
        {"name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}, "ph": "M"},
        {"name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": label}, "ph": "M"},
        {
            "name": "process_sort_index",
            "pid": pid,
            "tid": 0,
            "args": {"sort_index": sort},
            "ph": "M",
        },
    ]
    for tid, tname in threads.items():
        out.append(
            {"name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tname}, "ph": "M"}
        )
        out.append(
            {
                "name": "thread_sort_index",
                "pid": pid,
                "tid": tid,
                "args": {"sort_index": tid},
                "ph": "M",
            }
        )
    return out


def _x(name: str, pid: int, tid: int, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": f"{ts:.3f}",
        "dur": round(dur, 3),
        "ph": "X",
    }
    if args:
        event["args"] = args
    return event


def trace(rt: RankTimeline, pid: int, single: bool) -> list[dict[str, Any]]:
    """The timeline as trace events: host, CANN, hardware, HCCL and overlap tracks."""
    label = "NPU" if single else f"NPU {rt.device}"
    cann, hw = pid * 100 + 2, pid * 100 + 80 + rt.device
    hccl, ov = pid * 10000 + 1200 + rt.device, pid * 10000 + 1100 + rt.device
    events = _meta(pid, "Python", "CPU", 0, {pid: f"Thread {pid}"})
    events += _meta(cann, "CANN", "CPU", 2, {pid: f"Thread {pid}"})
    events += _meta(hw, "Ascend Hardware", label, 8, {2: "Stream 2"})
    events += _meta(
        hccl, "HCCL", label, 9, {0: "Group hccl_world_group Communication", 1: "Plane 0"}
    )
    events += _meta(
        ov,
        "Overlap Analysis",
        label,
        11,
        {0: "Computing", 1: "Communication", 2: "Communication(Not Overlapped)", 3: "Free"},
    )
    for t in rt.tasks:
        if t.core == "HCCL":
            events.append(
                _x(
                    t.name,
                    hccl,
                    0,
                    t.start_us,
                    t.dur_us,
                    **{
                        "connection_id": t.task_id,
                        "model id": 4294967295,
                        "data_type": "FP16",
                        "alg_type": "MESH",
                        "count": 5120,
                        "relay": "no",
                        "retry": "no",
                    },
                )
            )
            if t.wait_us > 0:
                events.append(
                    _x(
                        "Notify_Wait",
                        hccl,
                        1,
                        t.start_us,
                        t.wait_us,
                        **{"notify id": 0, "task type": "Notify Wait", "transport type": "LOCAL"},
                    )
                )
            continue
        events.append(
            _x(
                t.name,
                hw,
                2,
                t.start_us,
                t.dur_us,
                **{
                    "Model Id": 4294967295,
                    "Task Type": t.core,
                    "Stream Id": 2,
                    "Task Id": t.task_id,
                    "Batch Id": 0,
                    "Subtask Id": 4294967295,
                    "connection_id": t.task_id,
                },
            )
        )
    for start, dur in rt.host_copies:
        events.append(
            _x(
                "AscendCL@aclrtMemcpy",
                cann,
                pid,
                start,
                dur,
                **{
                    "Thread Id": pid,
                    "Mode": "ACL_RTS",
                    "level": "acl",
                    "id": "aclrtMemcpy",
                    "item_id": "0",
                },
            )
        )
    for tid, (name, ivs) in enumerate(overlap(rt).items()):
        events.extend(_x(name, ov, tid, s, e - s) for s, e in ivs)
    return events


def dump_trace(events: list[dict[str, Any]]) -> str:
    """Trace events as torch_npu writes them: one JSON array."""
    return json.dumps(events)
