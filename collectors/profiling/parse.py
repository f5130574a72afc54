"""Pure parsers, one per file of a capture: text in, figures out, no I/O.

The formats (headers, units, JSON keys) are those torch_npu's profiler writes
(Ascend/pytorch ``torch_npu/profiler/analysis/prof_view/``: ``_trace_step_time_parser.py``,
``_communication_parser.py``, ``_kernel_view_parser.py``) and msprof exports (Ascend/msprof
``docs/en/user_guide/profile_data_file_references.md``). Columns are found by name, never by
position: releases add and move columns (``Step Id`` first, ``Block Dim`` renamed ``Block
Num``...). A parser that meets text it cannot read raises ``CaptureError`` (a ``ValueError``)
with what it expected; the caller records that as a problem of the file and goes on with the others.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ascend_doctor.collectors.profiling.model import CollectiveTime, OperatorTime, StepSplit
from ascend_doctor.core import regex
from ascend_doctor.core.errors import CaptureError

COMPUTING = "Computing"
NOT_OVERLAPPED = "Communication(Not Overlapped)"
OVERLAPPED = "Overlapped"
COMMUNICATION = "Communication"
FREE = "Free"
MEMCPY_TASK = "MEMCPY_ASYNC"
"""Runtime task type of an asynchronous host<->device copy; msprof-analyze's
``cluster_time_summary`` recipe counts these tasks as the ``memory`` time."""
HOST_MEMCPY = "AscendCL@aclrtMemcpy"
"""The blocking copy API as the CANN layer of the timeline names it."""
NO_DEVICE = -1
"""Device of a timeline whose NPU processes are labelled plain ``NPU`` (one card)."""


def _rows(text: str, required: tuple[str, ...], what: str) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in required if c not in header]
    if missing:
        got = ",".join(header[:6]) or "nothing"
        raise CaptureError(f"{what}: expected columns {', '.join(missing)}; the header is {got}")
    reader.fieldnames = header
    return [{k: (v or "").strip() for k, v in row.items() if k is not None} for row in reader]


def _num(value: str) -> float:
    """A CSV number; torch_npu ends timestamps with a tab so spreadsheets keep them exact."""
    try:
        return float(value.strip().strip('"'))
    except ValueError:
        return 0.0


def _device(value: str) -> int:
    try:
        return int(float(value))
    except ValueError:
        return NO_DEVICE


def parse_step_trace_time(text: str) -> dict[int, StepSplit]:
    """torch_npu's ``step_trace_time.csv``: the split per device, summed over its steps."""
    rows = _rows(text, ("Device_id", COMPUTING, NOT_OVERLAPPED, FREE), "step_trace_time.csv")
    sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
    for row in rows:
        acc = sums[_device(row["Device_id"])]
        acc[0] += _num(row[COMPUTING])
        acc[1] += _num(row[NOT_OVERLAPPED])
        acc[2] += _num(row[FREE])
        acc[3] += _num(row.get(OVERLAPPED, "0"))
        acc[4] += 1
    return {
        dev: StepSplit(a[0], a[1], a[2], a[3], int(a[4]), "step_trace_time.csv")
        for dev, a in sums.items()
    }


def parse_cluster_step_trace_time(text: str) -> dict[int, StepSplit]:
    """msprof-analyze's ``cluster_step_trace_time.csv``: the split per rank (``Type`` rank)."""
    rows = _rows(
        text, ("Type", "Index", COMPUTING, NOT_OVERLAPPED, FREE), "cluster_step_trace_time.csv"
    )
    sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
    for row in rows:
        if row["Type"] != "rank":
            continue  # "stage" rows are the maximum over a pipeline stage, not a rank
        acc = sums[_device(row["Index"])]
        acc[0] += _num(row[COMPUTING])
        acc[1] += _num(row[NOT_OVERLAPPED])
        acc[2] += _num(row[FREE])
        acc[3] += _num(row.get(OVERLAPPED, "0"))
        acc[4] += 1
    return {
        rank: StepSplit(a[0], a[1], a[2], a[3], int(a[4]), "cluster_step_trace_time.csv")
        for rank, a in sums.items()
    }


def _top(totals: dict[tuple[str, str], list[float]]) -> tuple[OperatorTime, ...]:
    grand = sum(t for t, _ in totals.values()) or 1.0
    ops = [
        OperatorTime(name, core, int(count), total, total / grand)
        for (name, core), (total, count) in totals.items()
    ]
    return tuple(sorted(ops, key=lambda o: (-o.total_us, o.name)))


def parse_op_statistic(text: str) -> dict[int, tuple[OperatorTime, ...]]:
    """``op_statistic.csv`` (torch_npu) or ``op_statistic_*.csv`` (msprof), per device.

    A file without ``Device_id`` (older releases) gives its operators under ``NO_DEVICE``.
    """
    rows = _rows(text, ("OP Type", "Count", "Total Time(us)"), "op_statistic.csv")
    totals: dict[int, dict[tuple[str, str], list[float]]] = defaultdict(dict)
    for row in rows:
        key = (row["OP Type"], row.get("Core Type", ""))
        acc = totals[_device(row.get("Device_id", ""))].setdefault(key, [0.0, 0.0])
        acc[0] += _num(row["Total Time(us)"])
        acc[1] += _num(row["Count"])
    return {dev: _top(t) for dev, t in totals.items()}


def parse_kernel_details(text: str) -> dict[int, tuple[OperatorTime, ...]]:
    """``kernel_details.csv`` (torch_npu) or ``op_summary_*.csv`` (msprof), by operator type
    per device (``NO_DEVICE`` when the release writes no ``Device_id``).

    Communication operators are rows too (core ``HCCL``, ``Task ID`` N/A), so their time
    counts like any operator's.
    """
    header = text.lstrip("\ufeff").split("\n", 1)[0]
    if "Task Duration(us)" in header:  # msprof's op_summary names
        cols = ("OP Type", "Op Name", "Task Type", "Task Duration(us)")
    else:
        cols = ("Type", "Name", "Accelerator Core", "Duration(us)")
    rows = _rows(text, cols, "kernel_details.csv")
    totals: dict[int, dict[tuple[str, str], list[float]]] = defaultdict(dict)
    for row in rows:
        kind = row[cols[0]]
        if kind in ("", "N/A"):
            kind = row[cols[1]]  # task_time=l0 leaves the type out; the name still says
        acc = totals[_device(row.get("Device_id", ""))].setdefault((kind, row[cols[2]]), [0.0, 0.0])
        acc[0] += _num(row[cols[3]])
        acc[1] += 1
    return {dev: _top(t) for dev, t in totals.items()}


def collective_type(op_name: str) -> str:
    """``hcom_allReduce__674_0_1@8803796580339245440`` -> ``hcom_allReduce``."""
    return op_name.split("@", 1)[0].split("__", 1)[0]


def parse_communication(text: str) -> tuple[CollectiveTime, ...]:
    """torch_npu's ``communication.json``: ``{step: {collective|p2p: {op: info}}}``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CaptureError(f"communication.json: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise CaptureError("communication.json: expected an object of steps")
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for step in data.values():
        for group in ("collective", "p2p"):
            ops = step.get(group, {}) if isinstance(step, dict) else {}
            for name, info in ops.items():
                if name == "Total Op Info" or not isinstance(info, dict):
                    continue
                t = info.get("Communication Time Info", {})
                a = acc[collective_type(name)]
                a[0] += 1
                a[1] += 1000 * float(t.get("Elapse Time(ms)", 0) or 0)
                a[2] += 1000 * float(t.get("Wait Time(ms)", 0) or 0)
                a[3] += 1000 * float(t.get("Transit Time(ms)", 0) or 0)
    out = [CollectiveTime(n, int(a[0]), a[1], a[2], a[3]) for n, a in acc.items()]
    return tuple(sorted(out, key=lambda c: (-c.elapse_us, c.name)))


def parse_communication_statistic(text: str) -> tuple[CollectiveTime, ...]:
    """msprof's ``communication_statistic_*.csv`` (no wait/transit split there)."""
    rows = _rows(text, ("OP Type", "Count", "Total Time(us)"), "communication_statistic")
    out = [
        CollectiveTime(row["OP Type"], int(_num(row["Count"])), _num(row["Total Time(us)"]), 0, 0)
        for row in rows
    ]
    return tuple(sorted(out, key=lambda c: (-c.elapse_us, c.name)))


@dataclass
class TraceFacts:
    """What one device's part of a timeline says."""

    overlap: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """``Overlap Analysis`` track: Computing / Communication / ...(Not Overlapped) / Free."""
    kernels: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    """``Ascend Hardware`` tasks: (name, task type) -> [total us, count]."""
    memcpy_us: float = 0.0
    """``MEMCPY_ASYNC`` task time."""
    memcpy_count: int = 0
    """``MEMCPY_ASYNC`` tasks."""
    host_memcpy_us: float = 0.0
    """Blocking ``aclrtMemcpy`` time on the host."""
    host_memcpy_count: int = 0
    """Blocking ``aclrtMemcpy`` calls."""

    def split(self, source: str) -> StepSplit | None:
        """The Overlap Analysis track as a split, as msprof-analyze's adapter sums it."""
        if not self.overlap:
            return None
        o = self.overlap
        return StepSplit(
            o[COMPUTING],
            o[NOT_OVERLAPPED],
            o[FREE],
            max(0.0, o[COMMUNICATION] - o[NOT_OVERLAPPED]),
            1,
            source,
        )


_NPU_LABEL = regex.compile(r"^NPU(?: (\d+))?$")


def _events(text: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CaptureError(f"timeline: not JSON ({exc})") from exc
    if isinstance(data, dict):  # the Chrome trace object form
        data = data.get("traceEvents", [])
    if not isinstance(data, list):
        raise CaptureError("timeline: expected a list of trace events")
    return [e for e in data if isinstance(e, dict)]


def parse_trace(text: str) -> dict[int, TraceFacts]:
    """``trace_view.json`` (torch_npu) or ``msprof_*.json``: facts per device.

    Processes are found by their ``process_name`` metadata (``Overlap Analysis``, ``Ascend
    Hardware``, ``CANN``) and tied to a device by ``process_labels`` ``NPU`` / ``NPU <n>``,
    as torch_npu's ``TraceStepTimeParser`` does; host processes (label ``CPU``) count for
    every device, since a timeline with host data is one process's.
    """
    events = _events(text)
    names: dict[Any, str] = {}
    device: dict[Any, int] = {}
    for e in events:
        if e.get("ph") != "M":
            continue
        args = e.get("args") or {}
        if e.get("name") == "process_name":
            names[e.get("pid")] = str(args.get("name", ""))
        elif e.get("name") == "process_labels":
            m = _NPU_LABEL.match(str(args.get("labels", "")))
            if m:
                device[e.get("pid")] = int(m.group(1)) if m.group(1) else NO_DEVICE
    facts: dict[int, TraceFacts] = defaultdict(TraceFacts)
    host = TraceFacts()
    for e in events:
        if e.get("ph") != "X":
            continue
        pid = e.get("pid")
        process = names.get(pid, "")
        dur = _num(str(e.get("dur", 0)))
        if process == "Overlap Analysis":
            facts[device.get(pid, NO_DEVICE)].overlap[str(e.get("name"))] += dur
        elif process == "Ascend Hardware":
            f = facts[device.get(pid, NO_DEVICE)]
            kind = str((e.get("args") or {}).get("Task Type", ""))
            if kind == MEMCPY_TASK:
                f.memcpy_us += dur
                f.memcpy_count += 1
            else:
                acc = f.kernels.setdefault((str(e.get("name")), kind), [0.0, 0.0])
                acc[0] += dur
                acc[1] += 1
        elif process == "CANN" and e.get("name") == HOST_MEMCPY:
            host.host_memcpy_us += dur
            host.host_memcpy_count += 1
    out = dict(facts)
    if len(out) == 1:
        only = next(iter(out.values()))
        only.host_memcpy_us, only.host_memcpy_count = host.host_memcpy_us, host.host_memcpy_count
    elif not out and host.host_memcpy_count:
        out[NO_DEVICE] = host
    return out


def trace_operators(facts: TraceFacts) -> tuple[OperatorTime, ...]:
    """Top operators from the timeline's hardware tasks, when no CSV summary exists."""
    return _top(facts.kernels)


def parse_profiler_info(name: str, text: str) -> int | None:
    """Rank of a torch_npu ``profiler_info_{rank}.json`` (name first, then ``rank_id``)."""
    m = re.fullmatch(r"profiler_info_(\d+)\.json", name)
    if m:
        return int(m.group(1))
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    rank = data.get("rank_id") if isinstance(data, dict) else None
    return int(rank) if isinstance(rank, int | str) and str(rank).isdigit() else None
