"""Analysis of a profile capture: where the step time goes, per rank, and which rank is slow.

``analyze(DIR)`` reads a torch_npu (``*_ascend_pt/ASCEND_PROFILER_OUTPUT``), msprof
(``PROF_*/mindstudio_profiler_output``) or msprof-analyze cluster capture and returns a
``ProfileReport``; ``render_text`` turns it into the terminal report with bars, and
``ProfileReport.to_dict`` into JSON. Parsing is pure (``parse``), the walk is ``layout``.
"""

from __future__ import annotations

from pathlib import Path

from ascend_doctor.collectors.profiling.advisor import run_advisor
from ascend_doctor.collectors.profiling.analyze import build_report, load
from ascend_doctor.collectors.profiling.model import (
    AdvisorFinding,
    CollectiveTime,
    CopyTime,
    OperatorTime,
    ProfileReport,
    RankProfile,
    SlowRank,
    StepSplit,
)
from ascend_doctor.collectors.profiling.render import render_text


def analyze(root: Path, *, advisor: bool = True, advisor_exe: str | None = None) -> ProfileReport:
    """Analyse every capture under ``root``; with ``advisor``, run msprof-analyze too."""
    ranks, problems, captures = load(Path(root))
    findings: tuple[AdvisorFinding, ...] = ()
    status = "not run"
    if advisor and captures:
        findings, status = run_advisor(Path(root), advisor_exe)
    return build_report(str(root), ranks, problems, findings, status)


__all__ = [
    "AdvisorFinding",
    "CollectiveTime",
    "CopyTime",
    "OperatorTime",
    "ProfileReport",
    "RankProfile",
    "SlowRank",
    "StepSplit",
    "analyze",
    "render_text",
]
