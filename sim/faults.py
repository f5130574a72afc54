"""Hardware faults the simulated host can inject, with what each one looks like.

One table shared by the fake ``npu-smi`` (health output), the process that holds the card (plog
lines, torch_npu's error text) and the host kernel log, so every side of a fault tells the same
story, in the wording real hosts print (sim/SOURCES.md gives the source of each string).
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
    """npu-smi Error Code: the driver's event id in hexadecimal."""
    error_info: str
    """npu-smi Error Information."""
    acl_code: int
    """Runtime return code torch_npu prints (``error code is N``)."""
    acl_text: str
    """torch_npu's ``[Error]:`` text for that code (NPUErrorCodes.h), with its second line."""
    runtime_reason: str
    """The runtime's ``reason=`` of the failed call in the CANN error block."""
    plog_lines: tuple[tuple[str, str], ...]
    """(``file.cc:LINE``, text) of the runtime's plog lines; ``{device}`` is filled in."""
    kernel_text: str
    """The driver's line in the host kernel log (``/var/log/messages``), or empty."""
    driver_hang: bool = False
    """The holder is stuck in the driver for a while before it can exit."""
    ecc_double_bit: int = 0
    """Uncorrectable (double-bit) HBM ECC errors the fault adds to the card's counters, and
    pages the driver isolates for them (``npu-smi info -t ecc``)."""


FAULTS: dict[str, Fault] = {
    "heartbeat_lost": Fault(
        name="heartbeat_lost",
        health="Alarm",
        error_code="80FA4E00",
        error_info="node type=TS, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.",
        acl_code=507010,
        acl_text="The task scheduler loses the heartbeat. \n"
        "        Rectify the fault based on the error information in the ascend log.",
        runtime_reason="lost heartbeat",
        plog_lines=(
            ("direct_hwts_engine.cc:407", "SyncTask:Device[{device}] lost heartbeat."),
            (
                "log_inner.cpp:148",
                "ReportCallError:wait for compute device to finish failed, runtime result = "
                "507010.",
            ),
        ),
        kernel_text="[ascend] [ERROR] [drv_soft_fault] [heart_beat_judge 318] "
        "<kworker/5:1H:39365> Heartbeat lost! (device={device}; old_count=1104; new_count=1104; "
        "lost_count=4; total_lost_count=4; total_10s_count=0; total_15s_count 0).",
        driver_hang=True,
    ),
    "hbm_ecc": Fault(
        name="hbm_ecc",
        health="Critical",
        error_code="80E01801",
        error_info="node type=HBM, sensor type=Memory, event state=multi-bit ECC error",
        acl_code=507054,
        acl_text="",
        runtime_reason="hbm multi-bit ecc error",
        plog_lines=(
            (
                "log_inner.cpp:148",
                "ReportCallError:wait for compute device to finish failed, runtime result = "
                "507054.",
            ),
        ),
        kernel_text="",
        ecc_double_bit=1,
    ),
}


def get_fault(name: str) -> Fault:
    """Return the fault called ``name``; ValueError names the known ones."""
    try:
        return FAULTS[name]
    except KeyError:
        known = ", ".join(sorted(FAULTS))
        raise ValueError(f"unknown fault {name!r} (known: {known})") from None
