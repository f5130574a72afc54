"""The rule engine and the rule packs. Pure: bytes and samples in, findings out."""

from ascend_doctor.rules.engine import Engine, fill
from ascend_doctor.rules.loader import Rule, RuleSet, ThresholdRule, load_rules

__all__ = ["Engine", "Rule", "RuleSet", "ThresholdRule", "fill", "load_rules"]
