"""Host-wide brakes on remediation, persisted in the store so that a doctor restarted in a
crash loop does not get a fresh budget.

- A budget of steps per hour across the host, reserved before a step acts.
- A circuit breaker: the same category remediated ``breaker_count`` times within
  ``breaker_hours`` goes to a human and stays there until an incident of that category is
  acknowledged (``ascend-doctor incidents ack ID``).
- A record that cannot be read fails closed: no action, and an error that says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.events import Incident
from ascend_doctor.core.store import Store

HISTORY = "remediation.history"
"""Store meta key: ``[{"at": epoch, "category": id}, ...]`` of steps that acted."""
ACKED = "remediation.acknowledged"
"""Store meta key: ``{category: epoch}`` of the last acknowledgement per category."""
LAST_RUN = "remediation.last_run"
"""Store meta key: ``{action: epoch}`` of the last time each action acted (a device reset is
kept per device: ``reset_device:npu3``)."""
NO_COOLDOWN = frozenset({"restart", "collect_diagnostics", "capture_profile"})
"""Actions paced by other means (the supervisor's backoff) or harmless to repeat."""


@dataclass(frozen=True)
class Verdict:
    """Whether a step may act, and why not."""

    allowed: bool
    reason: str = ""


class Policy:
    """Budget and circuit breaker over the store's history of remediation steps."""

    def __init__(self, store: Store, config: RemediationConfig, clock: Callable[[], float]):
        self.store = store
        self.config = config
        self.clock = clock

    def _history(self) -> list[dict[str, Any]]:
        raw = self.store.meta(HISTORY)
        if raw is None:
            return []
        if not isinstance(raw, list) or not all(
            isinstance(e, dict)
            and isinstance(e.get("at"), int | float)
            and isinstance(e.get("category"), str)
            for e in raw
        ):
            raise ValueError(f"store meta '{HISTORY}' is corrupt: {str(raw)[:80]!r}")
        return raw

    def reserve(self, category: str) -> Verdict:
        """Check the brakes and, when they allow it, book one step before it acts."""
        now = self.clock()
        try:
            history = self._history()
            acked = self.store.meta(ACKED) or {}
            if not isinstance(acked, dict):
                raise ValueError(f"store meta '{ACKED}' is corrupt")
        except ValueError as exc:
            return Verdict(False, f"budget record unreadable, failing closed: {exc}")
        last_hour = [e for e in history if now - e["at"] < 3600]
        if len(last_hour) >= self.config.budget_per_hour:
            return Verdict(
                False,
                f"host budget of {self.config.budget_per_hour} remediations per hour is used up",
            )
        since = max(now - self.config.breaker_hours * 3600, float(acked.get(category, 0.0)))
        same = [e for e in history if e["category"] == category and e["at"] > since]
        if len(same) >= self.config.breaker_count:
            return Verdict(
                False,
                f"{category} was remediated {len(same)} times in {self.config.breaker_hours:g}h:"
                " a human must look (acknowledge an incident of it to re-arm)",
            )
        keep = [e for e in history if now - e["at"] < self.config.breaker_hours * 3600]
        self.store.set_meta(HISTORY, [*keep, {"at": now, "category": category}])
        return Verdict(True)

    def cooldown(self, actions: list[str]) -> tuple[str, float] | None:
        """The first of ``actions`` still cooling down and the seconds left, or None."""
        last = self._last_run()
        now = self.clock()
        for name in actions:
            if name in NO_COOLDOWN or not isinstance(last.get(name), int | float):
                continue
            left = float(last[name]) + self._period(name) - now
            if left > 0:
                return name, left
        return None

    def _last_run(self) -> dict[str, Any]:
        last = self.store.meta(LAST_RUN)
        return last if isinstance(last, dict) else {}

    def _period(self, action: str) -> float:
        if action.split(":", 1)[0] == "reset_device":
            return self.config.reset_cooldown
        return self.config.action_cooldown

    def ran(self, action: str) -> None:
        """An action acted: its cooldown starts now."""
        last = self._last_run()
        self.store.set_meta(LAST_RUN, {**last, action: self.clock()})

    def remaining(self) -> dict[str, Any]:
        """What the brakes allow now: budget left this hour, tripped breakers, cooldowns."""
        now = self.clock()
        try:
            history = self._history()
        except ValueError as exc:
            return {"error": str(exc), "budget_left": 0}
        acked = self.store.meta(ACKED)
        acked = acked if isinstance(acked, dict) else {}
        used = sum(1 for e in history if now - e["at"] < 3600)
        tripped = []
        for category in sorted({e["category"] for e in history}):
            since = max(now - self.config.breaker_hours * 3600, float(acked.get(category, 0.0)))
            n = sum(1 for e in history if e["category"] == category and e["at"] > since)
            if n >= self.config.breaker_count:
                tripped.append(category)
        last = self._last_run()
        cooling = {}
        for name, at in last.items():
            if name in NO_COOLDOWN or not isinstance(at, int | float):
                continue
            if at + self._period(name) > now:
                cooling[name] = round(at + self._period(name) - now)
        return {
            "budget_per_hour": self.config.budget_per_hour,
            "used_last_hour": used,
            "budget_left": max(0, self.config.budget_per_hour - used),
            "breakers_tripped": tripped,
            "cooling_down_s": cooling,
        }

    def acknowledge_incident(self, incident_id: int) -> Incident:
        """An operator saw this incident: mark it, and re-arm its category's breaker."""
        inc = self.store.update_incident(incident_id, acknowledged=True)
        self.acknowledge(inc.category.value)
        return inc

    def acknowledge(self, category: str) -> None:
        """An operator looked at this category: the breaker re-arms."""
        acked = self.store.meta(ACKED)
        acked = acked if isinstance(acked, dict) else {}
        self.store.set_meta(ACKED, {**acked, category: self.clock()})


__all__ = ["ACKED", "HISTORY", "LAST_RUN", "NO_COOLDOWN", "Policy", "Verdict"]
