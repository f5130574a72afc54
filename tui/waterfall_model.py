"""A trace as waterfall rows: the span tree flattened depth first, each row with where its
bar starts and how long it is as fractions of the whole trace (pure; no Textual)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ascend_doctor.core.store import SpanRecord


@dataclass(frozen=True, slots=True)
class WaterfallRow:
    """One span in the waterfall."""

    span: SpanRecord
    depth: int
    """0 for a root; a span whose parent is not stored is shown as a root."""
    start: float
    """Where its bar starts, 0..1 of the trace."""
    width: float
    """Its bar's length, 0..1 of the trace."""


def waterfall(spans: Sequence[SpanRecord]) -> list[WaterfallRow]:
    """Rows in tree order (children by start time)."""
    if not spans:
        return []
    t0 = min(s.start_ns for s in spans)
    t1 = max(s.end_ns for s in spans)
    total = max(1, t1 - t0)
    ids = {s.span_id for s in spans}
    children: dict[str, list[SpanRecord]] = {}
    roots: list[SpanRecord] = []
    for s in sorted(spans, key=lambda s: (s.start_ns, s.span_id)):
        if s.parent_id and s.parent_id in ids and s.parent_id != s.span_id:
            children.setdefault(s.parent_id, []).append(s)
        else:
            roots.append(s)
    rows: list[WaterfallRow] = []
    seen: set[str] = set()
    stack = [(r, 0) for r in reversed(roots)]
    while stack:
        span, depth = stack.pop()
        if span.span_id in seen:  # a cycle in bad data must not loop for ever
            continue
        seen.add(span.span_id)
        start = (span.start_ns - t0) / total
        width = max(0, span.end_ns - span.start_ns) / total
        rows.append(WaterfallRow(span, depth, start, width))
        for child in reversed(children.get(span.span_id, [])):
            stack.append((child, depth + 1))
    return rows


def duration_text(ns: int) -> str:
    """A span duration for humans: ``850us``, ``12.3ms``, ``4.20s``."""
    if ns < 1_000_000:
        return f"{ns / 1000:.0f}us"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.1f}ms"
    return f"{ns / 1e9:.2f}s"


__all__ = ["WaterfallRow", "duration_text", "waterfall"]
