"""Plans and runs remediation steps within the policy; records every decision.

The plan is the incident's (its root rule's ordered steps, fixed when the root was found).
The next step runs only when the previous one did not help (its root came back after the
restart). Attempts are bounded per incident; when steps or attempts run out the incident is
escalated. What an action is (touches the server, destructive, optional, its cooldown) is its
entry in the registry; incident state changes go through the incident manager.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from typing import Any

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.remediation import corroborate, recovery
from ascend_doctor.agent.remediation.context import Context, Done, Evidence
from ascend_doctor.agent.remediation.device_actions import failed_device, reset_command
from ascend_doctor.agent.remediation.policy import Policy
from ascend_doctor.agent.remediation.registry import (
    ACTIONS,
    OPTIONAL,
    ActionSpec,
    check_rules,
    describe_override,
)
from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import (
    ActionResult,
    Incident,
    IncidentState,
    Outcome,
    PlannedAction,
)
from ascend_doctor.core.records import InFlight
from ascend_doctor.core.words import plural
from ascend_doctor.rules.loader import RuleSet

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepResult:
    """What a remediation decision means for the server."""

    restart: bool
    """Start the server (again) now: a change was applied."""
    escalated: bool = False
    """The incident went to a human."""
    retry_at: float | None = None
    """The step waits for a cooldown: decide again at this wall-clock time."""


class Remediator:
    """Runs the next step of an incident's plan."""

    def __init__(self, ctx: Context, incidents: IncidentManager, rules: RuleSet) -> None:
        check_rules(rules)  # a plan naming an unknown action stops start-up
        self.ctx = ctx
        self.incidents = incidents
        incidents.optional = OPTIONAL  # a first step with only these recorded is undecided
        self.policy = Policy(ctx.store, ctx.config, ctx.clock)
        self._suggested_in_step = False  # attach mode: a launch change of this step is suggested

    async def remediate(self, incident_id: int) -> StepResult:
        """Decide and run the next step for an incident; every decision is recorded."""
        store, cfg = self.ctx.store, self.ctx.config
        unreadable = await _settle_left(self)
        inc = store.incident(incident_id)
        if unreadable:  # fails closed: something may be in flight, nothing acts
            self._record(inc, "plan", Outcome.REFUSED, unreadable, {})
            return self._escalate(inc, unreadable)
        if inc.state not in (IncidentState.OPEN, IncidentState.MITIGATING):
            return StepResult(restart=False)
        steps = inc.plan
        if cfg.mode == "off":
            self._record(inc, "plan", Outcome.REFUSED, "remediation.mode is off", {})
            return StepResult(restart=False)
        held = self._uncorroborated(inc)
        if held is not None:
            return held
        if inc.attempts >= cfg.max_attempts:
            return self._escalate(
                inc, f"{plural(inc.attempts, 'attempt')} made (limit {cfg.max_attempts})"
            )
        if inc.step >= len(steps):
            why = "no remediation step left" if steps else "no automatic fix for this failure"
            return self._escalate(inc, why)
        step = steps[inc.step]
        names = [p.name for p in step]
        destructive = any(ACTIONS[n].destructive for n in names if n in ACTIONS)
        if destructive and "collect_diagnostics" not in names:
            # what the device and the logs said, kept before anything is reset
            step = (PlannedAction("collect_diagnostics"), *step)
        acting = self._passive_mode() is None
        evidence = self._evidence(inc)
        if acting:
            for p in step:  # a step that waits for its moment books nothing meanwhile
                spec = ACTIONS.get(p.name)
                later = spec.postpone(self.ctx, inc, evidence) if spec and spec.postpone else None
                if later is not None and later[0] is None:
                    return self._escalate(inc, later[1])
                if later is not None and later[0] is not None:
                    self._record(inc, "plan", Outcome.REFUSED, later[1], {"retry_at": later[0]})
                    return StepResult(restart=False, retry_at=later[0])
            keys = [self._cooldown_key(p, inc, evidence) for p in step]
            wait = self.policy.cooldown([k for k in keys if k is not None])
            if wait is not None:
                name, seconds = wait
                self._record(
                    inc,
                    "plan",
                    Outcome.REFUSED,
                    f"{name} is cooling down: the step waits {seconds:.0f}s",
                    {"cooldown": name, "wait_s": round(seconds, 1)},
                )
                return StepResult(restart=False, retry_at=self.ctx.clock() + seconds)
            verdict = self.policy.reserve(inc.category.value, inc.id, inc.step)
            if not verdict.allowed:
                self._record(inc, "plan", Outcome.REFUSED, verdict.reason, {})
                return self._escalate(inc, verdict.reason)
        restart = False
        self._suggested_in_step = False
        counted = False
        try:
            for planned in step:
                done = await self._run(inc, planned, evidence)
                if planned.name in OPTIONAL:
                    continue  # recorded; the step goes on without it
                if done.outcome in (Outcome.REFUSED, Outcome.FAILED, Outcome.UNKNOWN):
                    inc = self.incidents.stepped(inc.id, applied=False)
                    counted = True
                    return self._escalate(inc, f"{planned.name}: {done.reason}")
                restart = restart or done.restart
            applied = restart and acting
            inc = self.incidents.stepped(inc.id, applied=applied)
            counted = True
        finally:
            # kept until the step is counted: a doctor killed before it leaves it to recovery.py,
            # a step that raised (a store write failed) to the next decision (``settle``)
            if counted:
                self.ctx.store.set_inflight(None)
        observe_only = all(not ACTIONS[p.name].touches_server for p in step if p.name in ACTIONS)
        if acting and not restart and observe_only and inc.step >= len(steps):
            # A plan that only looks (a profile, a snapshot) ends with what it saw: nothing
            # will verify it and no finding comes back while the condition holds, so the
            # incident goes to a human now, with the evidence the steps recorded.
            return self._escalate(inc, "the plan only observes: what it recorded is for a human")
        return StepResult(restart=applied)

    async def _run(self, inc: Incident, planned: PlannedAction, ev: Evidence) -> Done:
        spec = ACTIONS.get(planned.name)
        if spec is None:  # a stored plan from an older release: rules are checked at start-up
            done = Done(Outcome.REFUSED, f"unknown action {planned.name!r}")
            self._record(inc, planned.name, done.outcome, done.reason, planned.params)
            return done
        server = self.ctx.server
        if server.attached and spec.touches_server:
            return await self._run_attached(inc, planned, spec, ev)
        if spec.touches_server and not server.supervised:
            # observing only: the operator (or whatever runs the server) has to do it
            done = Done(
                Outcome.SUGGESTED,
                f"no supervised server: {planned.name} is left to the operator",
                dict(planned.params),
            )
            self._record(inc, planned.name, done.outcome, done.reason, done.params)
            return done
        mode = self._passive_mode()
        if spec.destructive and mode is not None:
            # A reset acts on the world even to check its preconditions (it stops the server).
            command = shlex.join(reset_command(failed_device(self.ctx, inc, planned.params, ev)))
            done = Done(
                _passive(mode),
                f"{mode}: would reset the device ({command}) once the server is stopped and"
                " no other process holds it",
                {**planned.params, "command": command},
            )
            self._record(inc, planned.name, done.outcome, done.reason, done.params)
            return Done(done.outcome, done.reason, done.params)
        if mode is None and (spec.touches_server or spec.destructive):
            # a doctor that dies in it leaves this behind for the next one (recovery.py)
            device = failed_device(self.ctx, inc, planned.params, ev) if spec.destructive else None
            flight = InFlight(inc.id, planned.name, device, self.ctx.clock(), inc.step)
            self.ctx.store.set_inflight(flight)
        try:
            done = await spec.run(self.ctx, inc, dict(planned.params), ev)
        except Exception as exc:  # an action's bug must not stop the daemon
            log.exception("action %s failed", planned.name)
            done = Done(Outcome.FAILED, f"{type(exc).__name__}: {exc}")
        if done.outcome == Outcome.OK and mode is not None:
            if done.override is not None:
                change = describe_override(*done.override)
                done = Done(
                    _passive(mode),
                    f"{mode}: would change the launch: {change} ({done.reason})",
                    {**done.params, "change": change},
                )
            else:
                done = Done(_passive(mode), f"{mode}: would {done.reason}", done.params)
        elif done.outcome == Outcome.OK:
            self._ran(planned, inc, ev)
            if done.override is not None:
                key, kind, value = done.override
                self.ctx.store.set_override(key, kind, value, inc.id)
        params = dict(done.params)
        if planned.name == "restart":
            params.update(self._launch_changes())
        self._record(inc, planned.name, done.outcome, done.reason, params)
        return done

    async def _run_attached(
        self, inc: Incident, planned: PlannedAction, spec: ActionSpec, ev: Evidence
    ) -> Done:
        """Attach mode: the server is not the doctor's. Launch changes are worked out from
        the running process's command line and suggested with the exact flag; a restart
        runs the operator's restart command (unless it would only restart an unchanged
        server after a suggested change); a device reset is suggested with its command."""
        params = dict(planned.params)
        if spec.changes_launch:
            done = await spec.run(self.ctx, inc, params, ev)
            if done.outcome == Outcome.OK and done.override is not None:
                change = describe_override(*done.override)
                self._suggested_in_step = True
                done = Done(
                    Outcome.SUGGESTED,
                    f"attach mode: change the server's launch yourself: {change} ({done.reason})",
                    {**done.params, "change": change},
                )
        elif planned.name == "restart" and self._suggested_in_step:
            done = Done(
                Outcome.SUGGESTED, "attach mode: restart the server after changing its launch"
            )
        elif planned.name == "restart" and self.ctx.server.can_restart:
            done = await spec.run(self.ctx, inc, params, ev)
            mode = self._passive_mode()
            if done.outcome == Outcome.OK and mode is not None:
                done = Done(_passive(mode), f"{mode}: would run the restart command")
            elif done.outcome == Outcome.OK:
                self._ran(planned, inc, ev)
                done = Done(Outcome.OK, "restart through the restart command", {}, restart=True)
        elif spec.destructive:
            command = shlex.join(reset_command(failed_device(self.ctx, inc, params, ev)))
            done = Done(
                Outcome.SUGGESTED,
                "attach mode: the doctor cannot stop a server it does not own; stop it, check"
                f" `npu-smi info` shows no process on the device, then run: {command}",
                {"command": command},
            )
        else:
            done = Done(
                Outcome.SUGGESTED,
                f"attach mode without --restart-command: {planned.name} is left to the operator",
                params,
            )
        self._record(inc, planned.name, done.outcome, done.reason, done.params)
        return done

    def _passive_mode(self) -> str | None:
        """``dry_run`` or ``suggest`` when decisions are only recorded, None when they act."""
        if self.ctx.config.dry_run:
            return "dry_run"
        return None if self.ctx.config.mode == "auto" else self.ctx.config.mode

    def _cooldown_key(self, planned: PlannedAction, inc: Incident, ev: Evidence) -> str | None:
        """What a cooldown is kept for (the registry says: the action, per device, or none)."""
        spec = ACTIONS.get(planned.name)
        if spec is None:
            return None
        return spec.cooldown_key(failed_device(self.ctx, inc, planned.params, ev))

    def _ran(self, planned: PlannedAction, inc: Incident, ev: Evidence) -> None:
        key = self._cooldown_key(planned, inc, ev)
        if key is not None:
            self.policy.ran(key)

    def _launch_changes(self) -> dict[str, Any]:
        overrides = self.ctx.store.overrides()
        return {
            "args": {o.key: o.value for o in overrides if o.kind in ("arg", "flag")},
            "env": {o.key: o.value for o in overrides if o.kind == "env"},
            "argv": list(self.ctx.spec().argv),
        }

    def _evidence(self, inc: Incident) -> Evidence:
        captures: dict[str, str] = {}
        stored = [f.finding for f in self.ctx.store.findings(inc.id)]
        for f in reversed(stored):
            captures.update(f.captures)
        # the root rule's own captures win over its symptoms'
        for f in stored:
            if f.rule == inc.rule:
                captures.update(f.captures)
        return Evidence(captures)

    def _uncorroborated(self, inc: Incident) -> StepResult | None:
        """Hold an incident that rests on text alone while the server is healthy (see
        ``corroborate.py``); None when an independent signal lets it go on."""
        device = failed_device(self.ctx, inc, {}, self._evidence(inc))
        if corroborate.signal(self.ctx, inc, device) is not None:
            return None
        now, window = self.ctx.clock(), self.ctx.config.corroboration_window
        left = corroborate.newest_text(self.ctx, inc) + window - now
        why = "log text alone while the server is running and healthy (/health 200)"
        if left <= 0:
            why += f": no independent signal in {window:g}s, nothing done"
            self._record(inc, corroborate.HOLD, Outcome.REFUSED, why, {})
            self.incidents.resolve(inc.id, "uncorroborated: " + why)
            return StepResult(restart=False)
        if not any(a.name == corroborate.HOLD for a in self.ctx.store.actions(inc.id)[-1:]):
            why += ": waiting for an exit, a failed /health, npu-smi or the metrics to agree"
            self._record(inc, corroborate.HOLD, Outcome.REFUSED, why, {"window_s": window})
        return StepResult(restart=False, retry_at=now + min(corroborate.POLL_S, left))

    def _escalate(self, inc: Incident, why: str) -> StepResult:
        self._record(inc, "escalate", Outcome.OK, why, {})
        self.incidents.escalate(inc.id, why)
        return StepResult(restart=False, escalated=self._about_this_server(inc))

    def _about_this_server(self, inc: Incident) -> bool:
        """Whether an incident concerns the watched server (it, or a card it uses): a faulty
        card nobody here uses goes to a human without stopping this server."""
        if not inc.subject.startswith("npu"):
            return True
        digits = inc.subject[3:].split(".")[0]
        devices = self.ctx.devices()
        return not digits.isdigit() or not devices or int(digits) in devices

    def record(
        self,
        incident_id: int,
        name: str,
        outcome: Outcome,
        reason: str,
        params: dict[str, Any] | None = None,
    ) -> None:
        """Record a decision taken outside a step (verification)."""
        self._record(self.ctx.store.incident(incident_id), name, outcome, reason, params or {})

    def _record(
        self, inc: Incident, name: str, outcome: Outcome, reason: str, params: dict[str, Any]
    ) -> None:
        result = ActionResult(name, params, outcome, reason, self.ctx.clock())
        self.ctx.store.add_action(inc.id, result)
        log.warning("incident %d: %s %s: %s", inc.id, name, outcome.value, reason)


async def _settle_left(remediator: Remediator) -> str:
    """Settle an action a step left in flight when it raised after the action ran (a store
    write failed): its outcome is not known, so it is settled as a dead doctor's is
    (``recovery.settle``), never simply run again. Returns why nothing may act when the
    record cannot be read, else ""."""
    try:
        left = remediator.ctx.store.inflight()
    except StoreError as exc:
        return f"the record of the action in flight is unreadable, failing closed: {exc}"
    if left is not None:
        await recovery.settle(
            remediator.ctx, remediator.incidents, remediator.record, left, "a store write failed"
        )
    return ""


def _passive(mode: str) -> Outcome:
    return Outcome.DRY_RUN if mode == "dry_run" else Outcome.SUGGESTED


__all__ = ["Remediator", "StepResult"]
