"""Device metrics in OpenTelemetry's hardware conventions, labelled to join NPU Exporter.

The common hardware metrics keep their names (``hw.status`` with ``hw.state``, ``hw.errors``
with ``error.type``, ``hw.power``); what only an NPU has goes under ``hw.npu.*``, the way the
conventions put a GPU's under ``hw.gpu.*`` (semantic-conventions ``model/hardware/``). Every
point carries the ``hw.*`` identity and, when npu-smi told them, Huawei NPU Exporter's own
label names and values (``id``, ``vdie_id``, ``model_name``: mind-cluster
``component/npu-exporter/collector/common/constants.go``), so ``on(vdie_id)`` joins the two.

Values are the last npu-smi sample of each device, reported by observable instruments: the
callbacks run on whichever thread collects (the OTLP reader's own, or a scrape), so they only
read an immutable snapshot the daemon's loop replaces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.metrics import Meter

from ascend_doctor.core import regex
from ascend_doctor.core.events import Finding
from ascend_doctor.metrics.observe import Kind, Point, Read, observe

MIB = 1024 * 1024

HW_STATES = ("ok", "degraded", "failed")
"""The ``hw.state`` values reported for every device (one of them 1, the others 0)."""

HEALTH_TO_STATE = {"OK": "ok", "Warning": "degraded", "Alarm": "degraded", "Critical": "failed"}
"""npu-smi's Health column -> ``hw.state``. Warning and Alarm are Huawei's minor and major
alarms (the device still runs), Critical a device that has failed. UNKNOWN maps to no state:
every ``hw.status`` point of the device is then 0."""


def device_attributes(subject: str, sample: dict[str, Any]) -> dict[str, str]:
    """``hw.*`` of one device from its npu-smi sample (subject ``npu3`` or ``npu3.1``)."""
    attrs = {"hw.id": subject, "hw.type": "npu"}
    name = sample.get("name")
    if name:
        attrs["hw.model"] = f"Ascend {name}" if not str(name).startswith("Ascend") else str(name)
    if sample.get("driver_version"):
        attrs["hw.driver_version"] = str(sample["driver_version"])
    return attrs


_DEVICE = regex.compile(r"^npu\d+(?:\.\d+)?$")
_CODE_SPLIT = regex.compile(r"[\s,;]+")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def join_labels(subject: str, data: dict[str, Any]) -> dict[str, str]:
    """NPU Exporter's labels for one device: ``id`` (the physical chip id: the A3
    ``Chip Phy-ID`` column, else the NPU id, which is the chip's on a host that sees every
    card), ``model_name`` (``<Chip Name>-<Chip Type>-<Chip Version>`` as its GetNpuName
    builds it) and ``vdie_id`` (the VDie ID's words joined by ``-``, as its DcGetDieID)."""
    labels: dict[str, str] = {}
    phy = data.get("phy_id")
    if isinstance(phy, int) and not isinstance(phy, bool):
        labels["id"] = str(phy)
    else:
        npu, _, chip = subject.removeprefix("npu").partition(".")
        if npu.isdigit() and not chip:
            labels["id"] = npu
    for key in ("model_name", "vdie_id"):
        if isinstance(data.get(key), str) and data[key]:
            labels[key] = data[key]
    return labels


def fault_codes(value: Any) -> frozenset[str]:
    """The codes of npu-smi's ``Error Code`` (``NA`` and ``0`` are none)."""
    if not isinstance(value, str):
        return frozenset()
    return frozenset(c for c in _CODE_SPLIT.split(value.strip()) if c and c not in ("NA", "0"))


_VALUES: tuple[tuple[str, str, str, str, Kind], ...] = (
    ("power", "hw.power", "W", "Power drawn by the NPU board", Kind.GAUGE),
    ("temperature", "hw.npu.temperature", "Cel", "NPU chip temperature", Kind.GAUGE),
    ("utilization", "hw.npu.utilization", "1", "AI Core busy, 0..1", Kind.GAUGE),
    # additive (a host's HBM is the sum of its cards'): up-down counters, as the
    # conventions' hw.gpu.memory.usage and .limit
    ("memory.usage", "hw.npu.memory.usage", "By", "NPU HBM in use", Kind.UP_DOWN),
    ("memory.limit", "hw.npu.memory.limit", "By", "NPU HBM size", Kind.UP_DOWN),
)
"""(value key, instrument, unit, description, kind) of each per-device value."""

_ECC: tuple[tuple[str, str, str], ...] = (
    ("hw.npu.hbm.ecc.errors", "{error}", "HBM ECC errors since the counters were cleared "
     "(npu-smi info -t ecc; ecc_type double_bit: uncorrectable)"),
    ("hw.npu.hbm.ecc.errors.aggregate", "{error}", "HBM ECC errors over the card's life"),
    ("hw.npu.hbm.ecc.isolated_pages", "{page}", "HBM pages isolated for ECC errors"),
)  # fmt: skip
"""(instrument, unit, description) of the ECC counters, each with ``ecc_type`` single_bit and
double_bit: NPU Exporter's six ``npu_chip_info_hbm_ecc_*`` gauges (mind-cluster
``component/npu-exporter/collector/metrics/collector_for_hbm.go``) under the hardware names."""
_ECC_KEYS = {
    "hw.npu.hbm.ecc.errors": "hbm_ecc_{}_errors",
    "hw.npu.hbm.ecc.errors.aggregate": "hbm_ecc_{}_total",
    "hw.npu.hbm.ecc.isolated_pages": "hbm_ecc_{}_isolated_pages",
}
_ECC_TYPES = ("single_bit", "double_bit")


@dataclass(frozen=True)
class _Device:
    attrs: dict[str, str]
    values: dict[str, float] = field(default_factory=dict)
    state: str | None = None
    codes: frozenset[str] = frozenset()


class DeviceMetrics:
    """``hw.*`` instruments fed from npu-smi samples and from findings about a device."""

    def __init__(self, meter: Meter) -> None:
        self._devices: dict[str, _Device] = {}
        observe(
            meter,
            "hw.status",
            self._status,
            unit="1",
            description="Operational status of the NPU: 1 for its hw_state, 0 for the others",
            kind=Kind.UP_DOWN,
        )
        self.errors = meter.create_counter(
            "hw.errors",
            unit="{error}",
            description="NPU faults: each npu-smi error code as it appears, each device fault "
            "read from the logs (error_type is the code or the rule)",
        )
        for key, name, unit, description, kind in _VALUES:
            observe(meter, name, self._values(key), unit=unit, description=description, kind=kind)
        for name, unit, description in _ECC:
            observe(meter, name, self._ecc(name), unit=unit, description=description)

    # -- what the metric reader reads (the last snapshot of every device) ----------------------

    def _snapshot(self) -> list[_Device]:
        return list(self._devices.values())

    def _status(self) -> list[Point]:
        return [
            (1 if dev.state == state else 0, {**dev.attrs, "hw.state": state})
            for dev in self._snapshot()
            for state in HW_STATES
        ]

    def _values(self, key: str) -> Read:
        def read() -> list[Point]:
            return [(d.values[key], d.attrs) for d in self._snapshot() if key in d.values]

        return read

    def _ecc(self, name: str) -> Read:
        def read() -> list[Point]:
            return [
                (d.values[key], {**d.attrs, "ecc_type": kind})
                for d in self._snapshot()
                for kind in _ECC_TYPES
                if (key := f"{name}/{kind}") in d.values
            ]

        return read

    # -- feeds ---------------------------------------------------------------------------------

    def sample(self, subject: str, data: dict[str, Any]) -> None:
        """One npu-smi sample of one chip: new values, and each error code that appeared."""
        attrs = {**device_attributes(subject, data), **join_labels(subject, data)}
        values: dict[str, float] = {}
        for key, name, scale in (
            ("power_w", "power", 1.0),
            ("temp_c", "temperature", 1.0),
            ("aicore_pct", "utilization", 0.01),
            ("hbm_used_mb", "memory.usage", MIB),
            ("hbm_total_mb", "memory.limit", MIB),
        ):
            if (v := _num(data.get(key))) is not None:
                values[name] = v * scale
        for name, pattern in _ECC_KEYS.items():
            for kind in _ECC_TYPES:
                if (v := _num(data.get(pattern.format(kind)))) is not None:
                    values[f"{name}/{kind}"] = v
        health = str(data.get("health") or "")
        codes = fault_codes(data.get("health_error_code")) if health != "OK" else frozenset()
        before = self._devices.get(subject)
        for code in sorted(codes - (before.codes if before else frozenset())):
            self.errors.add(1, {**attrs, "error.type": code})
        # each new uncorrectable ECC error is one of the device's errors
        key = "hw.npu.hbm.ecc.errors.aggregate/double_bit"
        if before is not None and key in values and key in before.values:
            if (rise := values[key] - before.values[key]) > 0:
                self.errors.add(int(rise), {**attrs, "error.type": "hbm_ecc_double_bit"})
        self._devices[subject] = _Device(attrs, values, HEALTH_TO_STATE.get(health), codes)

    def finding(self, finding: Finding) -> None:
        """A fault read from a log about one device counts as one of its errors (the rule is
        the error type). Findings from samples are left out: their codes are counted above."""
        if not finding.path or not _DEVICE.match(finding.subject):
            return
        dev = self._devices.get(finding.subject)
        attrs = dev.attrs if dev is not None else {"hw.id": finding.subject, "hw.type": "npu"}
        self.errors.add(1, {**attrs, "error.type": finding.rule})


__all__ = [
    "HEALTH_TO_STATE",
    "HW_STATES",
    "DeviceMetrics",
    "device_attributes",
    "fault_codes",
    "join_labels",
]
