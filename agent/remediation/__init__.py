"""Remediation: the action registry, the actions, the policy's brakes, and the remediator
that runs an incident's next step within them.

The names below are imported when first used, so that a command reading the policy's
budget (``status``) does not load every action and collector."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascend_doctor.agent.remediation.context import (
        Context,
        Done,
        Evidence,
        HostTools,
        ServerSide,
    )
    from ascend_doctor.agent.remediation.registry import ACTIONS, ActionSpec, check_rules
    from ascend_doctor.agent.remediation.remediator import Remediator, StepResult

_WHERE = {
    "ACTIONS": "registry",
    "ActionSpec": "registry",
    "Context": "context",
    "Done": "context",
    "Evidence": "context",
    "HostTools": "context",
    "Remediator": "remediator",
    "ServerSide": "context",
    "StepResult": "remediator",
    "check_rules": "registry",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "ACTIONS",
    "ActionSpec",
    "Context",
    "Done",
    "Evidence",
    "HostTools",
    "Remediator",
    "ServerSide",
    "StepResult",
    "check_rules",
]
