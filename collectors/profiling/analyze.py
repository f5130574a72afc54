"""From the files of a capture to a report: per rank, the slowest rank, one headline.

``rank_profiles`` and ``find_slowest`` are pure (texts in, records out) and are what the unit
tests call; ``analyze`` is the I/O wrapper that walks a directory and reads the files.

Which rank is "slow" follows msprof-analyze's own reasoning (its ``slow_rank`` recipe and
``SlowRankAnalyzer``): ranks of one group meet at every collective, so the slow rank does not
show a longer step, it shows more *own* time (computing + free) while the others show that
time as communication they wait in. A part of the split counts as a bottleneck when its spread
across ranks passes 5% of the mean step (``SlowRankAnalyzer.RATIO_THRESHOLD``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from ascend_doctor.collectors.profiling import parse
from ascend_doctor.collectors.profiling.layout import Capture, find_captures, read_text
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

SPREAD_THRESHOLD = 0.05
"""A part whose max-min spread over ranks passes this fraction of the mean step is a
bottleneck (msprof-analyze ``SlowRankAnalyzer.RATIO_THRESHOLD``)."""
TOP_N = 10
"""Operators kept per rank."""

Texts = dict[str, list[tuple[str, str]]]
"""File texts of one capture by kind: kind -> [(file name, text)]."""


T = TypeVar("T")


def _parsed(
    texts: Texts, kind: str, fn: Callable[[str], T], problems: list[str], where: str
) -> list[T]:
    out: list[T] = []
    for name, text in texts.get(kind, []):
        try:
            out.append(fn(text))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{where}/{name}: {exc}")
    return out


def rank_profiles(cap: Capture, texts: Texts, problems: list[str]) -> list[RankProfile]:
    """The ranks one capture holds (one, or one per device of an msprof capture)."""
    where = str(cap.path)
    splits: dict[int, StepSplit] = {}
    for found in _parsed(texts, "step_trace", parse.parse_step_trace_time, problems, where):
        splits.update(found)
    for found in _parsed(
        texts, "cluster_step_trace", parse.parse_cluster_step_trace_time, problems, where
    ):
        splits.update(found)
    facts: dict[int, parse.TraceFacts] = {}
    for found_facts in _parsed(texts, "trace", parse.parse_trace, problems, where):
        facts.update(found_facts)
    trace_name = texts["trace"][0][0] if texts.get("trace") else ""
    if not splits:
        splits = {d: s for d, f in facts.items() if (s := f.split(trace_name)) is not None}
    ops: dict[int, tuple[OperatorTime, ...]] = {}
    for kind, fn in (
        ("op_statistic", parse.parse_op_statistic),
        ("kernel_details", parse.parse_kernel_details),
    ):
        for found_ops in _parsed(texts, kind, fn, problems, where):
            ops.update(found_ops)
        if ops:
            break
    colls: tuple[CollectiveTime, ...] = ()
    for kind, cfn in (
        ("communication", parse.parse_communication),
        ("comm_statistic", parse.parse_communication_statistic),
    ):
        found_colls = _parsed(texts, kind, cfn, problems, where)
        if found_colls and found_colls[0]:
            colls = found_colls[0]
            break
    devices = sorted(set(splits) | set(facts) | set(ops)) or [parse.NO_DEVICE]
    if len(devices) > 1 and parse.NO_DEVICE in devices:
        devices.remove(parse.NO_DEVICE)
    one = len(devices) == 1
    files = tuple(sorted({name for entries in texts.values() for name, _ in entries}))
    out = []
    for dev in devices:
        split = splits.get(dev) or (next(iter(splits.values())) if one and splits else None)
        fact = facts.get(dev) or (next(iter(facts.values())) if one and facts else None)
        rank_ops = (
            ops.get(dev)
            or ops.get(parse.NO_DEVICE)
            or (next(iter(ops.values())) if one and ops else ())
            or (parse.trace_operators(fact) if fact else ())
        )
        rank = cap.rank if one and cap.rank is not None else dev
        out.append(
            RankProfile(
                rank=rank,
                path=where,
                layout=cap.layout,
                split=split,
                top_operators=rank_ops[:TOP_N],
                copies=_copies(fact, split),
                collectives=colls,
                files=files,
            )
        )
    return out


def _copies(fact: parse.TraceFacts | None, split: StepSplit | None) -> CopyTime | None:
    if fact is None:
        return None
    total = fact.memcpy_us + fact.host_memcpy_us
    step = split.total_us if split is not None else 0.0
    return CopyTime(
        fact.memcpy_us,
        fact.memcpy_count,
        fact.host_memcpy_us,
        fact.host_memcpy_count,
        total / step if step > 0 else 0.0,
    )


def _own(split: StepSplit) -> float:
    return (split.computing_us + split.free_us) / max(1, split.steps)


def _wait(rank: RankProfile) -> float:
    return sum(c.wait_us for c in rank.collectives)


def find_slowest(ranks: Sequence[RankProfile]) -> SlowRank | None:
    """The rank the others wait for, with the part and operator that grew; None if even."""
    timed = [r for r in ranks if r.split is not None and r.split.total_us > 0]
    if len(timed) < 2:
        return None
    mean_step = statistics.fmean(r.split.per_step_us for r in timed if r.split)
    own = {r.rank: _own(r.split) for r in timed if r.split}
    spread = max(own.values()) - min(own.values())
    waits = {r.rank: _wait(r) for r in timed}
    wait_spread = max(waits.values()) - min(waits.values())
    if spread > SPREAD_THRESHOLD * mean_step:
        slow = max(timed, key=lambda r: (own[r.rank], -r.rank))
        reason = "the other ranks wait for it at each collective"
    elif any(waits.values()) and wait_spread > SPREAD_THRESHOLD * mean_step:
        # Own time is even, yet one rank waits least in the collectives: the others wait
        # for it there (msprof-analyze slow_rank: the shortest communication is the slow one).
        slow = min(timed, key=lambda r: (waits[r.rank], r.rank))
        reason = "it waits least in the collectives, so the others wait for it there"
    else:
        return None
    others = [r for r in timed if r.rank != slow.rank]
    part, part_gap = _grown_part(slow, others)
    op, op_gap = _grown_operator(slow, others)
    return SlowRank(
        rank=slow.rank,
        own_us=own[slow.rank],
        others_us=statistics.median(own[r.rank] for r in others),
        reason=reason,
        part=part,
        part_gap_us=part_gap,
        operator=op,
        operator_gap_us=op_gap,
        wait_gap_us=max(0.0, statistics.median(waits[r.rank] for r in others) - waits[slow.rank]),
    )


def _grown_part(slow: RankProfile, others: list[RankProfile]) -> tuple[str, float]:
    assert slow.split is not None
    steps = max(1, slow.split.steps)
    best, gap = "", 0.0
    for name, value in slow.split.parts().items():
        theirs = statistics.median(
            o.split.parts()[name] / max(1, o.split.steps) for o in others if o.split
        )
        if value / steps - theirs > gap:
            best, gap = name, value / steps - theirs
    if not best:  # nothing grew on its own: it is the one the collectives wait for
        best = "communication not overlapped"
    return best, gap


def _grown_operator(slow: RankProfile, others: list[RankProfile]) -> tuple[str, float]:
    def totals(r: RankProfile) -> dict[str, float]:
        t = {o.name: o.total_us for o in r.top_operators}
        for c in r.collectives:
            t.setdefault(c.name, c.elapse_us - c.wait_us)
        return t

    mine, theirs = totals(slow), [totals(o) for o in others]
    best, gap = "", 0.0
    for name, value in mine.items():
        delta = value - statistics.median(t.get(name, 0.0) for t in theirs)
        if delta > gap:
            best, gap = name, delta
    return best, gap


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


def headline(ranks: Sequence[RankProfile], slowest: SlowRank | None) -> str:
    """One sentence naming the slow part: the slow rank, or the largest part of one rank."""
    if slowest is not None:
        steps = next((r.split.steps for r in ranks if r.rank == slowest.rank and r.split), 1)
        unit = "per step" if steps > 1 else "over the capture"
        if slowest.gap_us > 0:
            text = (
                f"rank {slowest.rank} is the slow rank: {_ms(slowest.gap_us)} {unit} above the "
                f"others ({slowest.gap_share:.0%}), in {slowest.part}"
            )
        else:
            text = (
                f"rank {slowest.rank} is the slow rank: the others wait "
                f"{_ms(slowest.wait_gap_us)} longer in the collectives {unit}"
            )
        if slowest.operator:
            text += f"; {slowest.operator} grew by {_ms(slowest.operator_gap_us)}"
        return text + f" ({slowest.reason})"
    timed = [r for r in ranks if r.split is not None and r.split.total_us > 0]
    if not timed:
        return "no step time in this capture (no step_trace_time.csv nor Overlap Analysis track)"
    r = max(timed, key=lambda x: x.split.per_step_us if x.split else 0.0)
    assert r.split is not None
    part, value = max(r.split.parts().items(), key=lambda kv: kv[1])
    span = "step" if r.split.steps > 1 else "captured NPU time"
    text = (
        f"rank {r.rank}: {span} {_ms(r.split.per_step_us)}, {part} {value / r.split.total_us:.0%}"
    )
    if r.top_operators:
        top = r.top_operators[0]
        text += f"; top operator {top.name} ({top.share:.0%} of operator time)"
    if len(timed) > 1:
        text += "; the ranks are even"
    return text


def _dedupe(ranks: list[RankProfile], problems: list[str]) -> list[RankProfile]:
    """One profile per rank: a rank's own capture beats the cluster summary, newest wins."""
    best: dict[int, RankProfile] = {}
    for r in ranks:
        old = best.get(r.rank)
        if old is None:
            best[r.rank] = r
            continue
        keep_new = (old.layout == "cluster") or (r.layout != "cluster" and r.path > old.path)
        if old.layout != "cluster" and r.layout != "cluster":
            problems.append(
                f"rank {r.rank} has several captures; used {max(old.path, r.path)}, "
                f"skipped {min(old.path, r.path)}"
            )
        if keep_new:
            best[r.rank] = r
    return [best[k] for k in sorted(best)]


def build_report(
    root: str,
    ranks: list[RankProfile],
    problems: list[str],
    advisor: Sequence[AdvisorFinding] = (),
    advisor_status: str = "not run",
) -> ProfileReport:
    """Assemble the report from rank profiles (pure)."""
    ranks = _dedupe(number_ranks(ranks), problems)
    slowest = find_slowest(ranks)
    return ProfileReport(
        root=root,
        ranks=tuple(ranks),
        slowest=slowest,
        headline=headline(ranks, slowest),
        advisor=tuple(advisor),
        advisor_status=advisor_status,
        problems=tuple(problems),
    )


def load(root: Path) -> tuple[list[RankProfile], list[str], list[Capture]]:
    """Read every capture under ``root``: rank profiles, problems, the captures found."""
    problems: list[str] = []
    ranks: list[RankProfile] = []
    captures = find_captures(root)
    for cap in captures:
        texts: Texts = {}
        for kind, paths in cap.files.items():
            for path in paths:
                try:
                    texts.setdefault(kind, []).append((path.name, read_text(path)))
                except (OSError, ValueError) as exc:
                    problems.append(f"{path}: {exc}")
        ranks.extend(rank_profiles(cap, texts, problems))
    if not captures:
        problems.append(
            f"{root}: no capture found (no ASCEND_PROFILER_OUTPUT, mindstudio_profiler_output "
            "or cluster_analysis_output below it)"
        )
    return ranks, problems, captures


def number_ranks(ranks: list[RankProfile]) -> list[RankProfile]:
    """Give a rank id to profiles whose capture says none (one card): the lowest free ones."""
    used = {r.rank for r in ranks if r.rank != parse.NO_DEVICE}
    free = (n for n in range(len(ranks) + len(used) + 1) if n not in used)
    return [replace(r, rank=next(free)) if r.rank == parse.NO_DEVICE else r for r in ranks]
