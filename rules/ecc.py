"""Uncorrectable HBM ECC errors in npu-smi's counters are a device fault.

A threshold rule compares one sample with a value; an ECC counter needs the sample before it
(a count that *rises* is a new error, an old count is history), which is why this rule is code,
like ``crash.py``'s. The counters come from ``npu-smi info -t ecc`` (collectors/npu_smi_ecc.py).

Two findings, one per rule id:

- ``npu-smi-hbm-ecc-rise``: the card's lifetime count of double-bit errors grew while the
  doctor watched: an error the ECC could not correct happened now. Critical, with the device
  fault's steps (stop, reset, verify health, restart): npu-smi is a signal independent of the
  logs.
- ``npu-smi-hbm-ecc-uncorrectable``: the first sample the doctor (or ``diagnose``) sees of a
  card already shows uncorrectable errors. Only reported: the errors may be old and their
  pages isolated already, and a reset on every doctor start would not clear them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ascend_doctor.core.events import Category, Finding, PlannedAction, Role, Sample, Severity

RISE = "npu-smi-hbm-ecc-rise"
"""The rule id of a rise seen while watching."""
RECORDED = "npu-smi-hbm-ecc-uncorrectable"
"""The rule id of uncorrectable errors already counted at the first sample."""
RULE_IDS = (RISE, RECORDED)

_CURRENT = "hbm_ecc_double_bit_errors"
_TOTAL = "hbm_ecc_double_bit_total"
_STEPS = ((PlannedAction("reset_device"), PlannedAction("restart")),)

EXPLAIN = (
    "npu-smi's ECC counters (`npu-smi info -t ecc -i N`) show double-bit HBM errors: errors "
    "the card's ECC could not correct, so the data they hit was lost; the driver isolates the "
    "page (the Isolated Pages counts) and reports a multi-bit ECC event (80E01801) in "
    "`npu-smi info -t health`, and the process on the card usually fails with 507054. Stop the "
    "server, reset the device, check its health, restart; a card whose count keeps rising "
    "needs hardware attention (isolate it)."
)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class EccWatch:
    """Remembers each device's last lifetime count of uncorrectable errors; ``seen`` are the
    last samples a doctor before this one stored, so a restarted doctor does not report the
    same old errors again (only a rise since)."""

    def __init__(self, seen: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._total: dict[str, int] = {}
        for subject, values in (seen or {}).items():
            total = _int(values.get(_TOTAL))
            current = _int(values.get(_CURRENT))
            if total is not None or current is not None:
                self._total[subject] = max(total or 0, current or 0)

    def evaluate(self, sample: Sample) -> Finding | None:
        """A finding when ``sample`` shows new uncorrectable errors (see the module)."""
        if sample.collector != "npu_smi":
            return None
        current = _int(sample.values.get(_CURRENT))
        total = _int(sample.values.get(_TOTAL))
        seen = total if total is not None else current
        if seen is None:
            return None
        before = self._total.get(sample.subject)
        self._total[sample.subject] = max(seen, before or 0)
        if before is None:
            if not current and not total:
                return None
            count = max(current or 0, total or 0)
            return _finding(
                sample,
                RECORDED,
                Severity.WARNING,
                f"{sample.subject} has {count} uncorrectable (double-bit) HBM ECC "
                f"error{'s' if count != 1 else ''} on record",
                (),
            )
        if seen <= before:
            return None
        return _finding(
            sample,
            RISE,
            Severity.CRITICAL,
            f"{sample.subject} had {seen - before} new uncorrectable (double-bit) HBM ECC "
            f"error{'s' if seen - before != 1 else ''} ({seen} in all)",
            _STEPS,
        )


def _finding(
    sample: Sample,
    rule: str,
    severity: Severity,
    summary: str,
    steps: tuple[tuple[PlannedAction, ...], ...],
) -> Finding:
    values = {**sample.values, "subject": sample.subject}
    return Finding(
        rule=rule,
        category=Category.DEVICE_FAULT,
        severity=severity,
        role=Role.ROOT,
        subject=sample.subject,
        summary=summary,
        at=sample.at,
        captures={k: str(v) for k, v in values.items() if isinstance(v, str | int | float)},
        remediation=steps,
        explain=EXPLAIN,
    )


__all__ = ["RECORDED", "RISE", "RULE_IDS", "EccWatch"]
