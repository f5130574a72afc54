"""Hardware faults the simulated host can inject, with what each one looks like.

One table shared by the fake ``npu-smi`` (health output) and the fake server
(plog and stdout lines), so both sides of a fault always tell the same story.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    """How one injected fault shows up on the host."""

    name: str
    health: str
    """npu-smi Health Status while the fault is present."""
    error_code: str
    """npu-smi Error Code (hex, as the driver reports it)."""
    error_info: str
    """npu-smi Error Information."""
    acl_code: int
    """Runtime return code torch_npu prints (``error code is N``)."""
    drv_func: str
    """Driver function and line named in the DRV plog line."""
    drv_text: str
    """DRV plog text; ``{device}`` is replaced by the physical device id."""


FAULTS: dict[str, Fault] = {
    "heartbeat_lost": Fault(
        name="heartbeat_lost",
        health="Critical",
        error_code="80E18005",
        error_info="node type=DEVMNG, sensor type=Heartbeat, event state=heartbeat lost",
        acl_code=507010,
        drv_func="devdrv_heartbeat_lost 1203",
        drv_text="device {device} heartbeat lost, device status abnormal.",
    ),
    "hbm_ecc": Fault(
        name="hbm_ecc",
        health="Critical",
        error_code="80E01801",
        error_info="node type=HBM, sensor type=Memory, event state=multi-bit ECC error",
        acl_code=507054,
        drv_func="devdrv_hbm_ecc_report 877",
        drv_text="device {device} hbm multi-bit ecc error, device status abnormal.",
    ),
}


def get_fault(name: str) -> Fault:
    """Return the fault called ``name``; ValueError names the known ones."""
    try:
        return FAULTS[name]
    except KeyError:
        known = ", ".join(sorted(FAULTS))
        raise ValueError(f"unknown fault {name!r} (known: {known})") from None
