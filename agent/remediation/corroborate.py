"""Corroboration before disruption: log text alone never stops, restarts, relaunches with
other flags or resets a server that is running and healthy.

Anyone who can send a request can make a server print text (a prompt echoed by a logger, an
output that repeats it, a tool-call parser quoting the model). So while the server runs and
its last ``/health`` probe answered 200, an incident whose only evidence is text waits for an
independent signal of the same failure: the server exited or failed start-up, ``/health``
failed, a collector sample (npu-smi health, stalled metrics) fired a rule in the incident,
npu-smi reports the incident's device not OK, or the doctor's own canary request went
unanswered. The wait is recorded, pages nobody, and ends
when a signal arrives or, after ``remediation.corroboration_window``, with nothing done.
"""

from __future__ import annotations

from collections.abc import Callable

from ascend_doctor.agent.remediation.context import Context
from ascend_doctor.core.events import Finding, Incident

POLL_S = 5.0
"""Seconds between two looks for a corroborating signal while an incident waits."""

HOLD = "corroborate"
"""The name decisions about corroboration are recorded under."""


def from_text(finding: Finding) -> bool:
    """A finding read from text (a log, a command's output), not from a collector sample."""
    return finding.offset >= 0 or bool(finding.path)


def signal(ctx: Context, inc: Incident, device: int | None) -> str | None:
    """An independent signal of the incident's failure, in words; None when there is none
    and the server is running and healthy (the incident rests on text alone)."""
    if not ctx.server.healthy:
        return "the server is not running healthy"
    stored = [s.finding for s in ctx.store.findings(inc.id)]
    sampled = [f for f in stored if not from_text(f)]
    if sampled or not stored:
        return f"a collector sample shows it ({sampled[0].rule})" if sampled else "no log text"
    if device is not None:
        for subject, values in sorted(ctx.store.latest_samples("npu_smi").items()):
            health = values.get("health")
            if subject.split(".")[0] == f"npu{device}" and health not in ("OK", None):
                return f"npu-smi reports {subject} health {health}"
    # the doctor's own request, not a user's text: a server that does not answer it is failing
    canary = ctx.store.latest_samples("canary").get("server") or {}
    missed = canary.get("canary_timeouts")
    if isinstance(missed, int | float) and missed >= 1:
        return f"the doctor's canary request got no answer ({int(missed)} in a row)"
    return None


def newest_text(ctx: Context, inc: Incident) -> float:
    """When the incident's newest finding was seen (its window starts there)."""
    return max((s.finding.at for s in ctx.store.findings(inc.id)), default=inc.opened_at)


def pages(healthy: Callable[[], bool], sampled_rules: frozenset[str]) -> Callable[[Incident], bool]:
    """Whether the opening of an incident may page: not while it rests on text alone (its root
    rule reads text) and the server is running and healthy."""
    return lambda inc: inc.rule in sampled_rules or not healthy()


__all__ = ["HOLD", "POLL_S", "from_text", "newest_text", "pages", "signal"]
