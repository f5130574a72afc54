"""Text layouts of the fake npu-smi, column for column as a 910B driver prints them."""

from __future__ import annotations

from typing import Any

from ascend_doctor.sim.state import DRIVER_VERSION, FIRMWARE_VERSION, HBM_TOTAL_MB

# Widths of the three table columns between the '|' characters.
_W1, _W2, _W3 = 27, 15, 52
_FULL = _W1 + _W2 + _W3 + 2

_TOP = "+" + "-" * _FULL + "+"
_SPLIT = "+" + "-" * _W1 + "+" + "-" * _W2 + "+" + "-" * _W3 + "+"
_DOUBLE = "+" + "=" * _W1 + "+" + "=" * _W2 + "+" + "=" * _W3 + "+"


def _row(a: str, b: str, c: str) -> str:
    return f"|{a:<{_W1}}|{b:<{_W2}}|{c:<{_W3}}|"


def hbm_used_mb(dev: dict[str, Any], processes: list[dict[str, Any]]) -> int:
    """HBM in use on ``dev``: the idle runtime reserve plus every holder's memory."""
    used = int(dev.get("idle_hbm_mb", 3400))
    used += sum(int(p["memory_mb"]) for p in processes if p["device"] == dev["id"])
    return min(used, HBM_TOTAL_MB)


def render_info(state: dict[str, Any]) -> str:
    """The ``npu-smi info`` device table followed by the process table."""
    devices: list[dict[str, Any]] = state["devices"]
    procs: list[dict[str, Any]] = state["processes"]
    title = f" {'npu-smi ' + DRIVER_VERSION:<33}{'Version: ' + DRIVER_VERSION}"
    lines = [
        _TOP,
        f"|{title:<{_FULL}}|",
        _SPLIT,
        _row(" NPU   Name", " Health", " Power(W)    Temp(C)           Hugepages-Usage(page)"),
        _row(" Chip", " Bus-Id", " AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"),
        _DOUBLE,
    ]
    for dev in devices:
        busy = any(p["device"] == dev["id"] for p in procs)
        power = float(dev["power"]) + (95.0 if busy else 0.0)
        lines.append(
            _row(
                f" {dev['id']:<6}{dev['name']}",
                f" {dev['health']}",
                f" {power:<12.1f}{dev['temp']:<18}{0:<5}/ {0}",
            )
        )
        lines.append(
            _row(
                f" {0}",
                f" {dev['bus_id']}",
                f" {0:<12}{0:<5}/ {0:<11}{hbm_used_mb(dev, procs):<5}/ {HBM_TOTAL_MB}",
            )
        )
        lines.append(_DOUBLE)
    lines.append(_SPLIT)
    lines.append(_row(" NPU     Chip", " Process id", f"{' Process name':<26}| Process memory(MB)"))
    lines.append(_DOUBLE)
    for dev in devices:
        holders = [p for p in procs if p["device"] == dev["id"]]
        if not holders:
            lines.append(f"|{' No running processes found in NPU ' + str(dev['id']):<{_FULL}}|")
        for p in holders:
            lines.append(
                _row(
                    f" {dev['id']:<8}{0}",
                    f" {p['pid']}",
                    f" {p['name']:<25}| {p['memory_mb']}",
                )
            )
        lines.append(_DOUBLE)
    return "\n".join(lines) + "\n"


def _pairs(pairs: list[tuple[str, object]]) -> str:
    # npu-smi indents 8 spaces and pads names to 31 columns before ': '.
    return "".join(f"        {name:<31}: {value}\n" for name, value in pairs)


def render_health(dev: dict[str, Any]) -> str:
    """``npu-smi info -t health -i N -c C``."""
    return _pairs(
        [
            ("Health Status", dev["health"]),
            ("Error Code", dev["error_code"]),
            ("Error Information", dev["error_info"]),
        ]
    )


def render_usages(dev: dict[str, Any], processes: list[dict[str, Any]]) -> str:
    """``npu-smi info -t usages -i N``."""
    used = hbm_used_mb(dev, processes)
    busy = any(p["device"] == dev["id"] for p in processes)
    return _pairs(
        [
            ("HBM Capacity(MB)", HBM_TOTAL_MB),
            ("HBM Usage Rate(%)", round(100 * used / HBM_TOTAL_MB)),
            ("Aicore Usage Rate(%)", 0),
            ("Aivector Usage Rate(%)", 0),
            ("Aicpu Usage Rate(%)", 0),
            ("Ctrlcpu Usage Rate(%)", 3 if busy else 0),
            ("HBM Bandwidth Usage Rate(%)", 0),
            ("NPU Utilization(%)", 0),
        ]
    )


def vdie_id(dev: dict[str, Any]) -> str:
    """A chip's VDie ID as npu-smi prints it: five words of 8 hex digits (the real layout:
    Ascend/mind-cluster docs/en/faultdiag/user_guide/03_collecting_logs.md, ``npu-smi info
    -i ${device_id} -c 0 -t board``: ``VDie ID : 42C711D4 20B03704 4A10C8D4 14CC040A
    D2102003``); made up per card here, stable for a card id."""
    n = int(dev["id"])
    return " ".join(f"{(0x42C711D4 + n * 0x1F3 + i * 0x10203) & 0xFFFFFFFF:08X}" for i in range(5))


def render_board(dev: dict[str, Any]) -> str:
    """``npu-smi info -t board -i N -c C`` (fields and order as in the source cited in
    :func:`vdie_id`)."""
    return _pairs(
        [
            ("NPU ID", dev["id"]),
            ("Chip ID", 0),
            ("Chip Type", "Ascend"),
            ("Chip Name", dev["name"]),
            ("NPU Name", f"Ascend{dev['name']}"),
            ("Chip Version", "V1"),
            ("Board ID", "0x33"),
            ("PCB ID", "NA"),
            ("BOM ID", 1),
            ("VDie ID", vdie_id(dev)),
            ("Chip Position ID", dev["id"]),
            ("PCIe Bus Info", dev["bus_id"]),
            ("Software Version", DRIVER_VERSION),
            ("Firmware Version", FIRMWARE_VERSION),
        ]
    )


USAGE = """\
Usage: npu-smi [info|set] [options]
  info                                   Show the NPU table and processes.
  info -t health -i <npu> -c <chip>      Show the health of a chip.
  info -t usages -i <npu>                Show utilization of an NPU.
  info -t board -i <npu> -c <chip>       Show board information.
  set -t reset -i <npu> -c <chip>        Reset a chip (no process may use it).
"""
