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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import Incident
from ascend_doctor.core.records import BudgetEntry, Ledger
from ascend_doctor.core.store import Store
from ascend_doctor.core.words import plural

if TYPE_CHECKING:  # `status` reads the brakes: it need not load the actions or incidents
    from ascend_doctor.agent.incidents import IncidentManager


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

    def _ledger(self) -> Ledger:
        """The brakes' memory; a record that cannot be read is an error that fails closed."""
        return self.store.ledger()

    def reserve(self, category: str, incident: int = 0, step: int = -1) -> Verdict:
        """Check the brakes and, when they allow it, book one step before it acts. A step
        booked already (``incident``, ``step``: a doctor died in it before it was counted, and
        it runs again) is not booked twice: it is one step."""
        now = self.clock()
        try:
            ledger = self._ledger()
        except StoreError as exc:
            return Verdict(False, f"budget record unreadable, failing closed: {exc}")
        history, acked = ledger.history, ledger.acknowledged
        if incident and any(e.incident == incident and e.step == step for e in history):
            return Verdict(True)
        last_hour = [e for e in history if now - e.at < 3600]
        if len(last_hour) >= self.config.budget_per_hour:
            return Verdict(
                False,
                f"host budget of {self.config.budget_per_hour} remediations per hour is used up",
            )
        since = max(now - self.config.breaker_hours * 3600, float(acked.get(category, 0.0)))
        same = [e for e in history if e.category == category and e.at > since]
        if len(same) >= self.config.breaker_count:
            return Verdict(
                False,
                f"{category} was remediated {plural(len(same), 'time')} in "
                f"{self.config.breaker_hours:g}h:"
                " a human must look (acknowledge an incident of it to re-arm)",
            )
        keep = [e for e in history if now - e.at < self.config.breaker_hours * 3600]
        self.store.set_ledger(
            replace(ledger, history=(*keep, BudgetEntry(now, category, incident, step)))
        )
        return Verdict(True)

    def cooldown(self, actions: list[str]) -> tuple[str, float] | None:
        """The first of ``actions`` still cooling down and the seconds left, or None."""
        last = self._last_run()
        now = self.clock()
        for name in actions:
            if name not in last:
                continue
            left = last[name] + self._period(name) - now
            if left > 0:
                return name, left
        return None

    def _last_run(self) -> dict[str, float]:
        try:
            return self._ledger().last_run
        except StoreError:
            return {}

    def _period(self, key: str) -> float:
        # the registry loads every action's module (npu-smi, asyncio): only when one ran
        from ascend_doctor.agent.remediation.registry import ACTIONS, Cooldown

        spec = ACTIONS.get(key.split(":", 1)[0])
        if spec is not None and spec.cooldown == Cooldown.DEVICE:
            return self.config.reset_cooldown
        return self.config.action_cooldown

    def ran(self, action: str) -> None:
        """An action acted: its cooldown starts now."""
        ledger = self._ledger()
        self.store.set_ledger(replace(ledger, last_run={**ledger.last_run, action: self.clock()}))

    def remaining(self) -> dict[str, Any]:
        """What the brakes allow now: budget left this hour, tripped breakers, cooldowns."""
        now = self.clock()
        try:
            ledger = self._ledger()
        except StoreError as exc:
            return {"error": str(exc), "budget_left": 0}
        history, acked = ledger.history, ledger.acknowledged
        used = sum(1 for e in history if now - e.at < 3600)
        tripped = []
        for category in sorted({e.category for e in history}):
            since = max(now - self.config.breaker_hours * 3600, float(acked.get(category, 0.0)))
            n = sum(1 for e in history if e.category == category and e.at > since)
            if n >= self.config.breaker_count:
                tripped.append(category)
        last = self._last_run()
        cooling = {}
        for name, at in last.items():
            if at + self._period(name) > now:
                cooling[name] = round(at + self._period(name) - now)
        return {
            "budget_per_hour": self.config.budget_per_hour,
            "used_last_hour": used,
            "budget_left": max(0, self.config.budget_per_hour - used),
            "breakers_tripped": tripped,
            "cooling_down_s": cooling,
        }

    def acknowledge(self, category: str) -> None:
        """An operator looked at this category: the breaker re-arms."""
        rearm(self.store, category, self.clock())


def acknowledge_incident(
    incidents: IncidentManager, incident_id: int, clock: Callable[[], float]
) -> Incident:
    """An operator saw this incident: it is marked, and its category's breaker re-arms (the
    CLI's ``incidents ack`` and the TUI's request alike)."""
    inc = incidents.acknowledge(incident_id)
    rearm(incidents.store, inc.category.value, clock())
    return inc


def rearm(store: Store, category: str, at: float) -> None:
    """Re-arm the circuit breaker of ``category`` (an operator acknowledged an incident)."""
    ledger = store.ledger()
    store.set_ledger(replace(ledger, acknowledged={**ledger.acknowledged, category: at}))


__all__ = ["Policy", "Verdict", "acknowledge_incident", "rearm"]
