"""The report as terminal text with bars: the CLI prints it, the TUI shows the same lines.

Plain text (no colour codes) so it reads the same in a terminal, a log, a TUI widget and a
bundle; bars are block characters scaled to a fixed width.
"""

from __future__ import annotations

from ascend_doctor.collectors.profiling.model import ProfileReport, RankProfile

BAR = 30
"""Width of a full bar, in characters."""
TOP = 5
"""Operators shown per rank."""
HINTS = {
    "computing": "an operator runs longer on that rank: its card (clock, temperature, a "
    "fault) or its share of the work; compare its top operators with another rank's",
    "free": "that rank's NPU waits for its host: dispatch, Python, data or a busy CPU; "
    "look at the host (CPU pinning, other processes) before the card",
    "communication not overlapped": "the group waits in the collectives for that rank: its "
    "link (HCCS/RoCE) or its collectives are slow; check its link health and HCCL logs",
}
"""What a slow part usually means, for the operator reading the report at 3 a.m."""
_FILL = {"computing": "█", "communication not overlapped": "▓", "free": "░"}


def bar(share: float, width: int = BAR, fill: str = "█") -> str:
    """A bar of ``share`` (0..1) of ``width`` characters, padded with dots."""
    n = max(0, min(width, round(share * width)))
    return fill * n + "·" * (width - n)


def _ms(us: float) -> str:
    return f"{us / 1000:8.2f} ms"


def _stacked(rank: RankProfile, scale: float) -> str:
    """One rank's step as a bar of its three parts, scaled so ``scale`` fills ``BAR``."""
    assert rank.split is not None
    steps = max(1, rank.split.steps)
    out, edge, done = "", 0.0, 0
    for name, value in rank.split.parts().items():
        edge += value / steps / scale * BAR if scale > 0 else 0.0
        n = min(BAR, round(edge)) - done
        out += _FILL[name] * max(0, n)
        done += max(0, n)
    return out


def _rank_lines(rank: RankProfile) -> list[str]:
    lines = [f"rank {rank.rank}  ({rank.layout}: {rank.path})"]
    split = rank.split
    if split is None:
        lines.append("  no step time in this capture")
    else:
        if split.steps > 1:
            lines.append(
                f"  step time {_ms(split.per_step_us).strip()} per step, {split.steps} steps"
            )
        else:  # vLLM starts and stops the profiler without a schedule: one span, no steps
            lines.append(f"  captured NPU time {_ms(split.total_us).strip()} (no profiler steps)")
        total = split.total_us or 1.0
        for name, value in split.parts().items():
            share = value / total
            lines.append(f"  {name:<29}{_ms(value)} {share:4.0%}  {bar(share, fill=_FILL[name])}")
        if split.overlapped_us:
            lines.append(f"  {'(communication overlapped)':<29}{_ms(split.overlapped_us)}")
    if rank.top_operators:
        lines.append("  top operators                   time  share  calls")
        for op in rank.top_operators[:TOP]:
            label = f"{op.name} [{op.core}]" if op.core else op.name
            lines.append(
                f"    {label[:40]:<40}{_ms(op.total_us)} {op.share:4.0%} {op.count:6d}  "
                f"{bar(op.share, 20)}"
            )
    if rank.copies is not None:
        c = rank.copies
        lines.append(
            f"  host<->device copies {_ms(c.total_us).strip()} ({c.share:.1%} of step time): "
            f"{c.device_count} async {_ms(c.device_us).strip()}, "
            f"{c.host_blocking_count} blocking aclrtMemcpy {_ms(c.host_blocking_us).strip()}"
        )
    for coll in rank.collectives[:3]:
        lines.append(
            f"  collective {coll.name}: {coll.count} calls, {_ms(coll.elapse_us).strip()} "
            f"(wait {_ms(coll.wait_us).strip()}, transit {_ms(coll.transit_us).strip()})"
        )
    return lines


def render_text(report: ProfileReport) -> str:
    """The whole report: headline, per-rank step bars, each rank's split, advisor, problems."""
    lines = [f"Profile {report.root}: {len(report.ranks)} rank(s)", f"  {report.headline}"]
    if report.slowest is not None and report.slowest.part in HINTS:
        lines.append(f"  what it usually means: {HINTS[report.slowest.part]}")
    lines.append("")
    timed = [r for r in report.ranks if r.split is not None]
    if len(timed) > 1:
        scale = max(r.split.per_step_us for r in timed if r.split)
        lines.append("time per rank (█ computing, ▓ communication not overlapped, ░ free)")
        for r in timed:
            assert r.split is not None
            mark = "  <- slow" if report.slowest and report.slowest.rank == r.rank else ""
            lines.append(
                f"  rank {r.rank:<4}{_ms(r.split.per_step_us)}  {_stacked(r, scale)}{mark}"
            )
        lines.append("")
    for r in report.ranks:
        lines.extend(_rank_lines(r))
        lines.append("")
    lines.append(f"msprof-analyze advisor: {report.advisor_status}")
    for f in report.advisor:
        lines.append(f"  [{f.priority}] {f.category}: {f.description}")
        if f.suggestion:
            lines.append(f"      suggestion (msprof-analyze): {f.suggestion}")
    if report.problems:
        lines.append("problems:")
        lines.extend(f"  {p}" for p in report.problems)
    return "\n".join(lines).rstrip() + "\n"
