"""The rule engine and the rule packs. Pure: bytes and samples in, findings out.

``Engine`` and ``fill`` are imported when first used: a reader of the packs (the action
registry, ``status``) does not load the matcher and the template miner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ascend_doctor.rules.loader import Rule, RuleSet, ThresholdRule, load_rules

if TYPE_CHECKING:
    from ascend_doctor.rules.engine import Engine, fill


def __getattr__(name: str) -> Any:
    if name in ("Engine", "fill"):
        from ascend_doctor.rules import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Engine", "Rule", "RuleSet", "ThresholdRule", "fill", "load_rules"]
