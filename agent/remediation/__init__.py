"""Remediation: actions, and the engine that runs them within the policy."""

from ascend_doctor.agent.remediation.actions import ACTIONS, Context, Done, Evidence
from ascend_doctor.agent.remediation.remediator import Remediator, StepResult

__all__ = ["ACTIONS", "Context", "Done", "Evidence", "Remediator", "StepResult"]
