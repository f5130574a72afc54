"""Where the files of a capture are: the I/O half of the analysis.

Two producers, two layouts (torch_npu's profiler guide "Output Result File Description";
msprof's "Profile Data File Reference"):

- torch_npu: ``<worker>_<pid>_<ts>_ascend_pt/`` with ``profiler_info_{rank}.json`` (plain
  ``profiler_info.json`` on one card) and ``ASCEND_PROFILER_OUTPUT/`` (``step_trace_time.csv``,
  ``kernel_details.csv``, ``op_statistic.csv``, ``communication.json``, ``trace_view.json``);
  its own ``PROF_*`` raw directory inside is not a second capture;
- msprof: ``PROF_<n>_<ts>_<16 letters>/`` with ``mindstudio_profiler_output/`` (the same
  figures, names suffixed ``_<ts>``) and ``device_<id>/info.json.<id>`` holding ``rank_id``;
- msprof-analyze's cluster output: ``cluster_analysis_output/cluster_step_trace_time.csv``.

The walk never follows symlinks, stops at a fixed depth and skips files past a size limit, so
a hostile or huge tree costs bounded time; what it skips is reported, not hidden.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ascend_doctor.collectors.profiling.parse import parse_profiler_info
from ascend_doctor.core import regex
from ascend_doctor.core.errors import CaptureError

MAX_DEPTH = 4
"""Directories below the root the walk descends (root/run/capture/output)."""
MAX_FILE_BYTES = 512 * 1024 * 1024
"""Largest file read; a bigger timeline is skipped with a problem, not loaded."""

TORCH_KINDS = {
    "step_trace_time.csv": "step_trace",
    "kernel_details.csv": "kernel_details",
    "op_statistic.csv": "op_statistic",
    "communication.json": "communication",
    "trace_view.json": "trace",
}
MSPROF_KINDS = (
    (regex.compile(r"^msprof_(?:slice_\d+_)?\d+\.json$"), "trace"),
    (regex.compile(r"^op_summary_(?:slice_\d+_)?\d+\.csv$"), "kernel_details"),
    (regex.compile(r"^op_statistic_(?:slice_\d+_)?\d+\.csv$"), "op_statistic"),
    (regex.compile(r"^communication_statistic_(?:slice_\d+_)?\d+\.csv$"), "comm_statistic"),
)


@dataclass
class Capture:
    """One rank's capture on disk."""

    path: Path
    """Its top directory."""
    layout: str
    """``torch_npu``, ``msprof`` or ``cluster``."""
    rank: int | None
    """Rank from the capture's own metadata, if it has any."""
    files: dict[str, list[Path]] = field(default_factory=dict)
    """Files by kind (``step_trace``, ``kernel_details``, ``trace``...)."""


def _torch_capture(top: Path) -> Capture:
    cap = Capture(top, "torch_npu", None)
    for info in sorted(top.glob("profiler_info*.json")):
        cap.rank = parse_profiler_info(info.name, _small(info))
        if cap.rank is not None:
            break
    out = top / "ASCEND_PROFILER_OUTPUT"
    for name, kind in TORCH_KINDS.items():
        if (out / name).is_file():
            cap.files.setdefault(kind, []).append(out / name)
    return cap


def _msprof_capture(top: Path) -> Capture:
    cap = Capture(top, "msprof", None)
    for info in sorted(top.glob("device_*/info.json.*")):
        try:
            data = json.loads(_small(info))
        except ValueError:
            continue
        rank = data.get("rank_id") if isinstance(data, dict) else None
        if isinstance(rank, int) and rank >= 0:
            cap.rank = rank
            break
    else:
        devices = [p.name.split("_", 1)[1] for p in top.glob("device_*") if p.is_dir()]
        if len(devices) == 1 and devices[0].isdigit():
            cap.rank = int(devices[0])
    out = top / "mindstudio_profiler_output"
    for path in sorted(out.iterdir()) if out.is_dir() else []:
        for pattern, kind in MSPROF_KINDS:
            if pattern.match(path.name):
                cap.files.setdefault(kind, []).append(path)
    return cap


def _small(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(1024 * 1024).decode("utf-8", "replace")
    except OSError:
        return ""


def find_captures(root: Path) -> list[Capture]:
    """Every capture under ``root`` (``root`` itself may be one, or an output dir of one)."""
    root = Path(root)
    if root.name in ("ASCEND_PROFILER_OUTPUT", "mindstudio_profiler_output"):
        root = root.parent
    found: list[Capture] = []
    cluster = root / "cluster_analysis_output" / "cluster_step_trace_time.csv"
    if root.name == "cluster_analysis_output":
        cluster = root / "cluster_step_trace_time.csv"
    if cluster.is_file():
        found.append(Capture(cluster.parent, "cluster", None, {"cluster_step_trace": [cluster]}))
    stack = [(root, 0)]
    while stack:
        here, depth = stack.pop()
        if (here / "ASCEND_PROFILER_OUTPUT").is_dir():
            found.append(_torch_capture(here))
            continue  # its PROF_* holds the same data in raw form
        if (here / "mindstudio_profiler_output").is_dir():
            found.append(_msprof_capture(here))
            continue
        if depth >= MAX_DEPTH:
            continue
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append((Path(entry.path), depth + 1))
    return sorted(found, key=lambda c: (c.layout != "cluster", str(c.path)))


def read_text(path: Path) -> str:
    """A capture file's text; OSError/ValueError say why it could not be read."""
    st = path.lstat()
    if not path.is_file() or path.is_symlink():
        raise CaptureError("not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise CaptureError(f"{st.st_size} bytes, over the {MAX_FILE_BYTES} byte limit")
    return path.read_text(encoding="utf-8", errors="replace")
