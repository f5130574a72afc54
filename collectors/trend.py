"""Memory that creeps: a trend over a window of samples and the time left until it is full.

Operators report memory that grows for hours until an OOM (vllm-project/vllm-ascend#5262: HBM
"climbs steadily at a rate of ~0.1GB per inference iteration ... ultimately triggers an
Out-of-Memory crash"; #2650 and #5847: host memory of the serving process growing by GBs an
hour). Each memory series (a card's HBM from npu-smi, the server tree's RSS) gets a
:class:`Trend`: a least-squares line over the last ``window`` seconds, and from it the growth
per hour and the seconds until the series meets its limit. A new server process, or a jump
no creep makes (the KV cache pool allocated at start, a restart's drop), starts the trend
over: only the slow, steady growth of one process counts.

When a planned restart goes is ``core/quiet.py``'s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

JUMP = 0.05
"""A change of more than this share of the limit between two samples is a step (an
allocation, a release), not creep: the trend starts over."""


@dataclass(frozen=True)
class Estimate:
    """What a trend says now."""

    growth_per_hour: float
    """Units per hour, by the least-squares slope over the window."""
    eta_s: float | None
    """Seconds until the series meets its limit at that rate (None: not growing)."""


class Trend:
    """One memory series of one process."""

    def __init__(self, window: float, min_span: float | None = None) -> None:
        self.window = window
        self.min_span = window / 2 if min_span is None else min_span
        """Seconds the samples must span before an estimate is given."""
        self._points: deque[tuple[float, float]] = deque()
        self._key: Hashable = None

    def add(self, at: float, value: float, limit: float, key: Hashable) -> Estimate | None:
        """Add one sample of the process ``key``; the estimate once the window is long enough."""
        last = self._points[-1][1] if self._points else None
        if key != self._key or (last is not None and abs(value - last) > JUMP * limit):
            self._points.clear()
            self._key = key
        self._points.append((at, value))
        while self._points and at - self._points[0][0] > self.window:
            self._points.popleft()
        if at - self._points[0][0] < self.min_span or len(self._points) < 3:
            return None
        slope = _slope(self._points)
        eta = (limit - value) / slope if slope > 0 else None
        return Estimate(round(slope * 3600, 1), None if eta is None else round(max(0.0, eta), 1))


def _slope(points: Sequence[tuple[float, float]]) -> float:
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var <= 0:
        return 0.0
    return sum((t - mx) * (v - my) for t, v in points) / var


__all__ = ["JUMP", "Estimate", "Trend"]
