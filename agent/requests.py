"""Requests from the CLI and the TUI (table ``requests``), carried out by the daemon.

The TUI stays a reader of state: to acknowledge an incident, capture a profile or run the
next remediation step it adds a request row, and this loop (one task of the daemon) carries
it out and records what became of it with ``Store.finish_request``:

- ``ack``: the same as ``ascend-doctor incidents ack ID``: the incident is marked acknowledged
  and the circuit breaker of its category re-arms.
- ``profile``: the daemon's profile capture (``profiling.enabled`` must be on).
- ``next_step``: the incident's next remediation step through the Remediator; the policy
  (mode, attempts, budget, breaker) still decides, and every decision is recorded as usual.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.remediation.policy import acknowledge_incident
from ascend_doctor.agent.remediation.remediator import StepResult
from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.records import Artifact
from ascend_doctor.core.store import Request

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.5  # seconds between looks at the requests table


class RequestRunner:
    """Carries out pending requests, oldest first, one at a time."""

    def __init__(
        self,
        incidents: IncidentManager,
        config: RemediationConfig,
        *,
        step: Callable[[int], Awaitable[StepResult]],
        profile: Callable[[], Awaitable[Artifact]],
        clock: Callable[[], float],
    ) -> None:
        self.incidents = incidents
        self.store = incidents.store
        self.config = config
        self.step = step
        """Runs the next remediation step of an incident (the daemon applies a restart)."""
        self.profile = profile
        """Captures a profile of the running server."""
        self.clock = clock

    async def run(self, interval: float = POLL_INTERVAL) -> None:
        """Look for pending requests every ``interval`` seconds until cancelled."""
        while True:
            try:
                await self.run_pending()
            except Exception:  # a failing part is logged and isolated; the daemon goes on
                log.exception("carrying out requests failed")
            await asyncio.sleep(interval)

    async def run_pending(self) -> int:
        """Carry out every pending request now; returns how many were handled."""
        pending = self.store.requests(pending_only=True)
        for req in pending:
            try:
                ok, result = await self._carry_out(req)
            except Exception as exc:  # one bad request must not block the ones after it
                log.exception("request %d (%s) failed", req.id, req.kind)
                ok, result = False, f"{type(exc).__name__}: {exc}"
            self.store.finish_request(req.id, ok=ok, result=result)
            log.warning(
                "request %d %s%s: %s",
                req.id,
                req.kind,
                f" incident {req.incident_id}" if req.incident_id is not None else "",
                result,
            )
        return len(pending)

    async def _carry_out(self, req: Request) -> tuple[bool, str]:
        if req.kind == "profile":
            art = await self.profile()
            return True, f"profile captured: {art.path}"
        if req.incident_id is None:
            return False, f"{req.kind} needs an incident"
        try:
            inc = self.store.incident(req.incident_id)
        except KeyError:
            return False, f"no incident #{req.incident_id}"
        if req.kind == "ack":
            acknowledge_incident(self.incidents, inc.id, self.clock)
            return (
                True,
                f"incident #{inc.id} acknowledged; the {inc.category.value} breaker re-arms",
            )
        if req.kind == "next_step":
            before = len(self.store.actions(inc.id))
            outcome = await self.step(inc.id)
            decisions = self.store.actions(inc.id)[before:]
            if not decisions:
                return True, f"nothing to do: incident #{inc.id} is {inc.state.value}"
            said = "; ".join(f"{a.name} {a.outcome.value}: {a.reason}" for a in decisions)
            if outcome.restart:
                said += " (the server restarts with the change)"
            return True, said
        return False, f"unknown request kind {req.kind!r}"


__all__ = ["POLL_INTERVAL", "RequestRunner"]
