"""Remediation: the action registry, the actions, the policy's brakes, and the remediator
that runs an incident's next step within them."""

from ascend_doctor.agent.remediation.context import Context, Done, Evidence, HostTools, ServerSide
from ascend_doctor.agent.remediation.registry import ACTIONS, ActionSpec, check_rules
from ascend_doctor.agent.remediation.remediator import Remediator, StepResult

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
