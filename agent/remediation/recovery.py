"""What a doctor that died left behind, put right before the server starts again.

A server it left running is stopped (two on one port would fight; adopting one would need
its output pipe, which died with the doctor). An action it died in is recorded as interrupted
(outcome unknown); a device it was resetting is waited for until npu-smi says it is healthy
(never a server started on a card still in reset); the incident goes to a human instead of
staying open for ever. An action that finished, its outcome recorded, before the doctor could
count its step has the step counted now: the plan goes on with the next recurrence."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.remediation.context import Context
from ascend_doctor.core.errors import CollectorError, StoreError
from ascend_doctor.core.events import ACTIVE_STATES, ActionResult, Outcome
from ascend_doctor.core.procs import stop_leftover
from ascend_doctor.core.records import InFlight

log = logging.getLogger(__name__)

Record = Callable[[int, str, Outcome, str, dict[str, Any]], None]
POLL_S = 1.0
"""Seconds between two looks at a device that may still be resetting."""


async def recover(ctx: Context, incidents: IncidentManager, record: Record) -> None:
    """Put right what the last doctor left running: a server (stopped: its pid and start time
    say it is still the one the store names), an action it died in."""
    last = ctx.store.server()
    if last is not None and await stop_leftover(
        last.pid, last.proc_start, ctx.config.command_timeout
    ):
        log.warning("stopped pid %s, a server left running by a dead doctor", last.pid)
    try:
        flight = ctx.store.inflight()
    except StoreError as exc:
        log.error("the record of the action in flight is unreadable: %s", exc)
        return
    if flight is not None:
        await settle(ctx, incidents, record, flight, "the doctor stopped")


async def settle(
    ctx: Context, incidents: IncidentManager, record: Record, flight: InFlight, cause: str
) -> None:
    """Put right an action left in flight (``cause``: why it was left: the doctor died, or a
    store write failed after it ran): its step counted when its outcome was recorded, else
    recorded as interrupted (outcome unknown), a device it reset waited for, and the incident
    sent to a human; then the record is cleared."""
    acts = ctx.store.actions(flight.incident_id)
    if done := [a for a in acts if a.name == flight.action and a.at >= flight.started_at]:
        _count_step(ctx, incidents, flight, done[-1])  # it finished: only the count was lost
        ctx.store.set_inflight(None)
        return
    when = time.strftime("%H:%M:%S", time.localtime(flight.started_at))
    why = f"interrupted: {cause} while {flight.action} ran (since {when})"
    log.error("incident %d: %s", flight.incident_id, why)
    record(flight.incident_id, flight.action, Outcome.UNKNOWN, why, {"device": flight.device})
    if flight.device is not None:
        health = await _settled(ctx, flight.device)
        ok = health == "OK"
        record(
            flight.incident_id,
            "recover",
            Outcome.OK if ok else Outcome.FAILED,
            f"device {flight.device} health {health} before the server starts again",
            {"device": flight.device, "health": health},
        )
    inc = ctx.store.incident(flight.incident_id)
    if inc.state in ACTIVE_STATES:
        incidents.escalate(inc.id, why)
    ctx.store.set_inflight(None)


def _count_step(
    ctx: Context, incidents: IncidentManager, flight: InFlight, done: ActionResult
) -> None:
    """Count the step as it would have been (OK: mitigating, the next recurrence takes the next
    step; failed: to a human) when the doctor died after its action's record, before the count."""
    inc = ctx.store.incident(flight.incident_id)
    if inc.state in ACTIVE_STATES and inc.step == flight.step:
        log.warning("incident %d: %s had finished; its step is counted now", inc.id, done.name)
        inc = incidents.stepped(inc.id, applied=done.outcome == Outcome.OK)
    if inc.state in ACTIVE_STATES and done.outcome != Outcome.OK:
        incidents.escalate(inc.id, f"{done.name}: {done.reason}")


async def _settled(ctx: Context, device: int) -> str:
    """The device's health once a reset that may still run is over (or the last word seen
    when ``command_timeout`` passes first)."""
    from ascend_doctor.collectors.npu_smi import parse_pairs, run_npu_smi

    deadline = ctx.clock() + ctx.config.command_timeout
    health = "unknown"
    while True:
        try:
            res = await run_npu_smi(
                ctx.npu_smi(),
                ["info", "-t", "health", "-i", str(device), "-c", "0"],
                timeout=ctx.host.npu_smi_timeout,
            )
            health = parse_pairs(res.stdout).get("Health Status", "unknown")
        except CollectorError as exc:  # a card in reset does not answer
            health = f"unknown ({exc})"
        if health == "OK" or ctx.clock() >= deadline:
            return health
        await ctx.sleep(POLL_S)


__all__ = ["recover", "settle"]
