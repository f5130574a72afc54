"""When an incident's next step runs, and what it means for the server.

Incidents become *due* on events: findings that opened or advanced them (after a short grace,
so that the server's exit is decided on together with its last words), a step that met a
cooldown (when it is over), a verification that failed. Due incidents arrive on one asyncio
queue; this is the one place that runs their steps and the one place that restarts the
server for a step (the supervisor restarts after an exit on the decision returned to it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from ascend_doctor.agent.remediation import StepResult
from ascend_doctor.agent.server import ServerHandle
from ascend_doctor.agent.supervisor import ExitDecision
from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.errors import RemediationError
from ascend_doctor.core.events import ProcessState

log = logging.getLogger(__name__)

DECIDE_DELAY = 1.0
"""Seconds a finding waits for the server's exit to be seen with it."""
EXIT_GRACE = 15.0
"""Seconds a dying server (engine-death line seen) gets to exit on its own."""
RESTART_REASON = "restarting the server to apply the remediation"

Step = Callable[[int], Awaitable[StepResult]]


class Decider:
    """Steps due incidents, one batch at a time, and applies what the steps mean."""

    def __init__(
        self,
        step: Step,
        server: ServerHandle,
        config: RemediationConfig,
        *,
        read_last_words: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._step = step
        self.server = server
        self.config = config
        self._read_last_words = read_last_words
        self._clock = clock
        self._queue: asyncio.Queue[int] = asyncio.Queue()
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._since: dict[int, float] = {}  # when each pending incident first became due
        self._lock = asyncio.Lock()
        self.acting: list[int] = []
        """The incidents of the batch being decided (what a planned stop is for)."""
        self.refused: Callable[[str], None] = lambda why: None
        """Told when a restart for a step may not happen (several servers, ``[ha]``)."""

    # -- events ----------------------------------------------------------------------------

    def due(self, incident_id: int, *, after: float = DECIDE_DELAY) -> None:
        """The incident needs a decision ``after`` seconds from now (an earlier pending time
        stands)."""
        if incident_id in self._timers:
            return
        self._since.setdefault(incident_id, self._clock())
        self._schedule(incident_id, after)

    def due_at(self, incident_id: int, wall: float) -> None:
        """The incident needs a decision at wall-clock time ``wall`` (a cooldown ends)."""
        self._cancel(incident_id)
        self._since[incident_id] = self._clock()
        self._schedule(incident_id, max(0.0, wall - time.time()))

    @property
    def busy(self) -> bool:
        """A step runs now (the canary waits: the server is being remediated)."""
        return self._lock.locked()

    @property
    def pending(self) -> list[int]:
        """Incidents waiting for a decision."""
        return sorted(self._since)

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """Take due incidents off the queue until cancelled; the ones due together are one
        batch, so one restart serves them all."""
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            ready = []
            for incident_id in dict.fromkeys(batch):
                if incident_id not in self._since:
                    continue  # decided meanwhile (with the server's exit, or on request)
                waited = self._clock() - self._since.get(incident_id, self._clock())
                if self.server.dying and waited < EXIT_GRACE:
                    # its exit is coming and will be decided on with all its last words
                    self._schedule(incident_id, EXIT_GRACE - waited)
                    continue
                ready.append(incident_id)
            if not ready:
                continue
            try:
                await self._apply(await self._decide(ready))
            except Exception:  # a failing part is logged and isolated; the daemon goes on
                log.exception("deciding on incidents %s failed", ready)

    async def on_exit(self) -> ExitDecision:
        """The server exited: every pending incident is decided now, with its last words."""
        self._read_last_words()
        restart, escalated = await self._decide(list(self._since))
        if restart:
            return ExitDecision.RESTART
        if escalated and self.config.on_escalation == "stop":
            log.error("leaving the server stopped: its failure went to a human")
            return ExitDecision.STOP
        return ExitDecision.BACKOFF

    async def step_now(self, incident_id: int) -> StepResult:
        """The next step of an incident because an operator asked (the policy still decides)."""
        self._cancel(incident_id)
        async with self._lock:
            result = await self._one(incident_id)
        await self._apply((result.restart, False))
        return result

    # -- steps -----------------------------------------------------------------------------

    async def _decide(self, ids: list[int]) -> tuple[bool, bool]:
        """Run the next step of each; (restart the server?, any escalated about it?)."""
        restart = escalated = False
        async with self._lock:
            self.acting = list(ids)
            for incident_id in ids:
                if incident_id not in self._since:
                    # decided while this batch waited for the lock: what made it due came
                    # during that step and belongs to the failure being fixed
                    continue
                self._cancel(incident_id)
                try:
                    result = await self._one(incident_id)
                except Exception:
                    log.exception("remediation of incident %d failed", incident_id)
                    continue
                restart = restart or result.restart
                escalated = escalated or result.escalated
        return restart, escalated

    async def _one(self, incident_id: int) -> StepResult:
        try:
            result = await self._step(incident_id)
        finally:
            # evidence that arrived while this step ran (a device reset takes seconds)
            # belongs to the failure being fixed, not to a failure of the fix
            self._cancel(incident_id)
        if result.retry_at is not None:
            self.due_at(incident_id, result.retry_at)
        return result

    async def _apply(self, outcome: tuple[bool, bool]) -> None:
        """What a batch of steps means for the server: the one restart for a step."""
        restart, escalated = outcome
        if self.server.process is None:
            return
        if restart:
            try:
                await self.server.restart(RESTART_REASON)
            except RemediationError as exc:  # another server must keep serving: recorded
                log.warning("the server is not restarted: %s", exc)
                self.refused(str(exc))
        elif (
            escalated
            and self.config.on_escalation == "keep"
            and self.server.state == ProcessState.STOPPED
        ):
            self.server.start()  # a step stopped it before the failure went to a human

    # -- timers ----------------------------------------------------------------------------

    def _schedule(self, incident_id: int, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._timers[incident_id] = loop.call_later(delay, self._fire, incident_id)

    def _fire(self, incident_id: int) -> None:
        self._timers.pop(incident_id, None)
        self._queue.put_nowait(incident_id)

    def _cancel(self, incident_id: int) -> None:
        timer = self._timers.pop(incident_id, None)
        if timer is not None:
            timer.cancel()
        self._since.pop(incident_id, None)


__all__ = ["DECIDE_DELAY", "EXIT_GRACE", "Decider"]
