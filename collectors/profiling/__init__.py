"""Analysis of a profile capture: where the step time goes, per rank, and which rank is slow.

``analyze(DIR)`` reads a torch_npu (``*_ascend_pt/ASCEND_PROFILER_OUTPUT``), msprof
(``PROF_*/mindstudio_profiler_output``) or msprof-analyze cluster capture and returns a
``ProfileReport``; ``render_text`` turns it into the terminal report with bars, and
``ProfileReport.to_dict`` into JSON. Parsing is pure (``parse``), the walk is ``layout``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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


def analyze(
    root: Path | Sequence[Path], *, advisor: bool = True, advisor_exe: str | None = None
) -> ProfileReport:
    """Analyse every capture under ``root`` (a directory, or the directories of one capture's
    ranks); with ``advisor``, run msprof-analyze too (on their common parent)."""
    roots = [Path(root)] if isinstance(root, str | Path) else [Path(r) for r in root]
    ranks: list[RankProfile] = []
    problems: list[str] = []
    found = False
    for r in roots:
        more, probs, captures = load(r)
        ranks += more
        problems += probs
        found |= bool(captures)
    findings: tuple[AdvisorFinding, ...] = ()
    status = "not run"
    if advisor and found:
        target = roots[0] if len(roots) == 1 else Path(os.path.commonpath(roots))
        findings, status = run_advisor(target, advisor_exe)
    label = str(roots[0]) if len(roots) == 1 else ", ".join(str(r) for r in roots)
    return build_report(label, ranks, problems, findings, status)


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
