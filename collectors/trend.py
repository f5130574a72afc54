"""Memory that creeps: a trend over a window of samples and the time left until it is full.

Operators report memory that grows for hours until an OOM (vllm-project/vllm-ascend#5262: HBM
"climbs steadily at a rate of ~0.1GB per inference iteration ... ultimately triggers an
Out-of-Memory crash"; #2650 and #5847: host memory of the serving process growing by GBs an
hour). Each memory series (a card's HBM from npu-smi, the server tree's RSS) gets a
:class:`Trend`: a least-squares line over the last ``window`` seconds, and from it the growth
per hour and the seconds until the series meets its limit. A new server process, or a jump
no creep makes (the KV cache pool allocated at start, a restart's drop), starts the trend
over: only the slow, steady growth of one process counts.

The quiet-window and spacing decisions of a planned restart are here too, pure functions of
the samples the store keeps, so that the daemon only wires them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Protocol

JUMP = 0.05
"""A change of more than this share of the limit between two samples is a step (an
allocation, a release), not creep: the trend starts over."""


CLOSER = 0.75
"""A planned restart this much sooner after the last one than that one after its own is a
leak that speeds up; less than that is the quiet window's jitter."""


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


def quiet_now(loads: Sequence[tuple[float, float]], now: float, window: float) -> str | None:
    """Why now is a quiet moment for a restart, or None. ``loads`` are (time, tokens the users
    were served in the interval before it), oldest first: quiet is nothing served in the last
    interval, or, with a whole ``window`` of history, the lowest load of that window."""
    recent = [(at, load) for at, load in loads if now - at <= window]
    if not recent:
        return None
    latest = recent[-1][1]
    if latest <= 0:
        return "no user request was served in the last interval"
    if now - recent[0][0] >= window * 0.9 and latest <= min(load for _, load in recent):
        return f"the lowest load of the last {window / 60:.0f} minutes ({latest:g} tokens)"
    return None


def closer_together(times: Sequence[float]) -> str | None:
    """Why planned restarts at ``times`` (the first start, then each planned restart, then
    now) come closer together each time, or None: a leak that speeds up is for a human."""
    gaps = [b - a for a, b in pairwise(times)]
    if len(gaps) < 2 or gaps[-1] >= CLOSER * gaps[-2]:
        return None
    shown = ", then ".join(f"{g / 60:.1f} min" for g in gaps[-3:])
    return f"planned restarts come closer together ({shown} apart)"


class QuietConfig(Protocol):
    """What a planned restart waits by (``[remediation]``)."""

    @property
    def quiet_retry(self) -> float:
        """Seconds before a waiting restart looks again."""
        ...

    @property
    def quiet_window(self) -> float:
        """Seconds of load history; its lowest load is a quiet moment too."""
        ...


def restart_moment(
    now: float,
    restarts: Sequence[float],
    captures: Mapping[str, str],
    since_found: float,
    samples: Sequence[tuple[float, Mapping[str, Any]]],
    cfg: QuietConfig,
) -> tuple[float | None, str] | None:
    """Whether a planned restart goes now (None), waits for a quiet window (when to look
    again, why) or goes to a human when planned restarts come closer together (None, why).
    ``restarts`` are the first start and each earlier planned restart; ``captures`` the
    finding's (its ``*_oom_eta_s``, taken ``since_found`` seconds ago); ``samples`` the vllm
    collector's. The OOM does not wait for a quiet window."""
    spacing = closer_together([*restarts, now])
    if spacing is not None:
        return None, spacing
    for key in ("hbm_oom_eta_s", "rss_oom_eta_s"):
        try:
            if float(captures[key]) - since_found < 3 * cfg.quiet_retry:
                return None  # memory is full before the next look: no time to wait
        except (KeyError, ValueError):
            continue
    loads = [
        (at, float(v.get("user_tokens_delta", v.get("generation_tokens_delta")) or 0))
        for at, v in samples
    ]
    if quiet_now(loads, now, cfg.quiet_window) is not None:
        return None
    return now + cfg.quiet_retry, "the restart waits for a quiet window: users are being served"


__all__ = [
    "JUMP",
    "Estimate",
    "QuietConfig",
    "Trend",
    "closer_together",
    "quiet_now",
    "restart_moment",
]
