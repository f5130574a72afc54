"""When a planned restart (memory creep) goes: pure decisions on what the store keeps.

A restart planned for memory that creeps waits for a quiet moment (nothing served, or the
lowest load of the last hour), goes at once when memory would run out first, and goes to a
human when planned restarts come closer together each time: a leak that speeds up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from typing import Any, Protocol

from ascend_doctor.core.events import Incident
from ascend_doctor.core.store import Store

CLOSER = 0.75
"""A planned restart this much sooner after the last one than that one after its own is a
leak that speeds up; less than that is the quiet window's jitter."""
ACTION = "restart_when_quiet"
"""The action whose planned restarts are spaced."""


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
    for key in ("hbm_oom_eta_s", "rss_oom_eta_s", "api_rss_oom_eta_s"):
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


class QuietContext(Protocol):
    """What :func:`until_quiet` reads (a remediation ``Context`` is one)."""

    @property
    def config(self) -> QuietConfig:
        """``[remediation]``."""
        ...

    @property
    def store(self) -> Store:
        """Incidents, their decisions, the vllm collector's samples."""
        ...

    @property
    def clock(self) -> Callable[[], float]:
        """Wall clock."""
        ...


class HasCaptures(Protocol):
    """The incident's merged captures (a remediation ``Evidence``)."""

    @property
    def captures(self) -> dict[str, str]:
        """Capture name to value."""
        ...


def until_quiet(
    ctx: QuietContext, inc: Incident, ev: HasCaptures
) -> tuple[float | None, str] | None:
    """The ``postpone`` of ``restart_when_quiet``: :func:`restart_moment` on the store's
    record of earlier planned restarts and the users' load; None acts now."""
    now, store, cfg = ctx.clock(), ctx.store, ctx.config
    doctor = store.doctor()
    restarts = [*([doctor.started_at] if doctor else []), *store.action_times(inc.category, ACTION)]
    samples = store.sample_series("vllm", "server", now - cfg.quiet_window)
    return restart_moment(now, restarts, ev.captures, now - inc.opened_at, samples, cfg)


__all__ = [
    "ACTION",
    "CLOSER",
    "HasCaptures",
    "QuietConfig",
    "QuietContext",
    "closer_together",
    "quiet_now",
    "restart_moment",
    "until_quiet",
]
