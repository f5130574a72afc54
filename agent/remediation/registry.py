"""Every remediation action, one entry each: what it runs, whether it touches the server,
whether it is destructive, how its cooldown is kept, how it reads to an operator and which
parameters a rule may give it. Rules name actions; their plans are checked against this
registry when rules load (``rules lint`` and the daemon's start-up), so a misspelt action or
parameter stops start-up with the rule's file and line instead of failing at 3 a.m.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ascend_doctor.agent.remediation import device_actions as dev
from ascend_doctor.agent.remediation import launch_actions as launch
from ascend_doctor.agent.remediation.context import Context, Evidence
from ascend_doctor.agent.remediation.launch_actions import Action
from ascend_doctor.core.errors import RuleError
from ascend_doctor.core.events import Incident, PlannedAction
from ascend_doctor.core.quiet import until_quiet
from ascend_doctor.rules.loader import RuleSet


class Cooldown(StrEnum):
    """How an action's cooldown is kept."""

    NONE = "none"
    """Paced by other means (the supervisor's backoff) or harmless to repeat."""
    ACTION = "action"
    """One cooldown for the action (``remediation.action_cooldown``)."""
    DEVICE = "device"
    """One cooldown per device (``remediation.reset_cooldown``): resetting card 3 says nothing
    about when card 6 may be reset."""


@dataclass(frozen=True)
class ActionSpec:
    """One remediation action."""

    name: str
    """The name rules use."""
    run: Action
    """What it does."""
    describe: Callable[[Mapping[str, Any]], str]
    """How a planned use of it reads to an operator (``set PYTORCH_NPU_ALLOC_CONF=...``)."""
    touches_server: bool = False
    """It changes, stops or restarts the server: only for a server the doctor runs (or, in
    attach mode, through the restart command and as suggestions)."""
    changes_launch: bool = False
    """Its effect is a changed launch command (an override)."""
    destructive: bool = False
    """The evidence on the device is gone afterwards: a diagnostics snapshot is taken first."""
    optional: bool = False
    """A refusal or failure of it does not stop the rest of its step."""
    cooldown: Cooldown = Cooldown.ACTION
    """How its cooldown is kept."""
    params: Mapping[str, type] = field(default_factory=dict)
    """Parameters a rule may give it, with their types."""
    postpone: Callable[[Context, Incident, Evidence], tuple[float | None, str] | None] | None = None
    """Asked before the step books anything: (time, why) to decide again then, (None, why)
    to go to a human instead, None to act now."""

    def cooldown_key(self, device: int | None = None) -> str | None:
        """What the cooldown is kept under (None: no cooldown)."""
        if self.cooldown == Cooldown.NONE:
            return None
        if self.cooldown == Cooldown.DEVICE and device is not None:
            return f"{self.name}:npu{device}"
        return self.name


def _fixed(text: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda params: text


_SPECS = (
    ActionSpec(
        "lower_max_model_len",
        launch.lower_max_model_len,
        lambda p: "halve --max-model-len" if p.get("halve") else "lower --max-model-len to fit",
        touches_server=True,
        changes_launch=True,
        params={"halve": bool},
    ),
    ActionSpec(
        "lower_swap_space",
        launch.lower_swap_space,
        _fixed("halve --swap-space"),
        touches_server=True,
        changes_launch=True,
    ),
    ActionSpec(
        "lower_gpu_memory_utilization",
        launch.lower_gpu_memory_utilization,
        lambda p: (
            "lower --gpu-memory-utilization"
            + (f" by {p['step']}" if "step" in p else " by remediation.gpu_memory_utilization_step")
        ),
        touches_server=True,
        changes_launch=True,
        params={"step": float},
    ),
    ActionSpec(
        "lower_max_num_seqs",
        launch.lower_max_num_seqs,
        _fixed("halve --max-num-seqs"),
        touches_server=True,
        changes_launch=True,
    ),
    ActionSpec(
        "set_env",
        launch.set_env,
        lambda p: f"set {p.get('name', '?')}={p.get('value', '')}",
        touches_server=True,
        changes_launch=True,
        params={"name": str, "value": str},
    ),
    ActionSpec(
        "enforce_eager",
        launch.enforce_eager,
        _fixed("add --enforce-eager (no graph capture)"),
        touches_server=True,
        changes_launch=True,
    ),
    ActionSpec(
        "raise_hccl_timeout",
        launch.raise_hccl_timeout,
        lambda p: f"double {p.get('name', 'HCCL_CONNECT_TIMEOUT')}",
        touches_server=True,
        changes_launch=True,
        params={"name": str},
    ),
    ActionSpec(
        "restart",
        dev.restart,
        _fixed("restart the server"),
        touches_server=True,
        cooldown=Cooldown.NONE,
    ),
    ActionSpec(
        "restart_when_quiet",
        dev.restart,
        _fixed("restart the server in the next quiet window, before memory runs out"),
        touches_server=True,
        cooldown=Cooldown.NONE,
        postpone=until_quiet,
    ),
    ActionSpec(
        "reset_device",
        dev.reset_device,
        lambda p: (
            "reset the failed NPU with npu-smi set -t reset"
            + (f" (device {p['device']})" if "device" in p else "")
        ),
        touches_server=True,
        destructive=True,
        cooldown=Cooldown.DEVICE,
        params={"device": int},
    ),
    ActionSpec(
        "collect_diagnostics",
        dev.collect_diagnostics,
        _fixed("snapshot npu-smi and the log tails"),
        optional=True,
        cooldown=Cooldown.NONE,
    ),
    ActionSpec(
        "capture_profile",
        dev.capture_profile,
        _fixed("capture a profile of the live server"),
        optional=True,
        cooldown=Cooldown.NONE,
    ),
)

ACTIONS: dict[str, ActionSpec] = {spec.name: spec for spec in _SPECS}
"""Every action by name; rules name these."""
OPTIONAL = frozenset(spec.name for spec in _SPECS if spec.optional)
"""The optional actions: they look (diagnostics, a profile) and change nothing."""


def plan_errors(plan: tuple[tuple[PlannedAction, ...], ...]) -> list[str]:
    """What is wrong with a rule's plan against the registry ([] when nothing)."""
    errors = []
    for n, step in enumerate(plan, 1):
        for planned in step:
            spec = ACTIONS.get(planned.name)
            if spec is None:
                errors.append(
                    f"step {n}: unknown action {planned.name!r}: expected one of"
                    f" {', '.join(sorted(ACTIONS))}"
                )
                continue
            for key, value in planned.params.items():
                want = spec.params.get(key)
                if want is None:
                    known = ", ".join(sorted(spec.params)) or "none"
                    errors.append(
                        f"step {n}: action {planned.name} has no parameter {key!r}"
                        f" (its parameters: {known})"
                    )
                elif not _is(value, want):
                    errors.append(
                        f"step {n}: action {planned.name} parameter {key!r} is {value!r}:"
                        f" expected {want.__name__}"
                    )
    return errors


def _is(value: Any, want: type) -> bool:
    if want is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


def check_rules(rules: RuleSet) -> None:
    """Every rule's plan names known actions with known parameters; a RuleError naming each
    rule's file and line otherwise."""
    problems = []
    for rule in rules.text:
        for error in plan_errors(rule.remediation):
            problems.append(f"{rule.file or '?'}: rule '{rule.id}' remediation {error}")
    for threshold in rules.thresholds:
        for error in plan_errors(threshold.remediation):
            problems.append(f"{threshold.file or '?'}: rule '{threshold.id}' remediation {error}")
    if problems:
        raise RuleError("\n".join(problems))


def describe_override(key: str, kind: str, value: str) -> str:
    """An override as an operator types it: ``--max-model-len 16384``, ``--enforce-eager``,
    ``PYTORCH_NPU_ALLOC_CONF=expandable_segments:True``."""
    if kind == "flag":
        return key
    if kind == "env":
        return f"{key}={value}"
    return f"{key} {value}"


__all__ = [
    "ACTIONS",
    "OPTIONAL",
    "ActionSpec",
    "Cooldown",
    "check_rules",
    "describe_override",
    "plan_errors",
]
