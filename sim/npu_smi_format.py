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
    # npu-smi prints printf("\t%-30s : %s\n", name, value) (npucli/src/npu_info_print.c).
    return "".join(f"\t{name:<30} : {value}\n" for name, value in pairs)


def render_health(dev: dict[str, Any]) -> str:
    """``npu-smi info -t health -i N -c C``: codes in hex, one information line per code."""
    codes = [c for c in str(dev["error_code"]).split() if c != "NA"]
    if not codes:
        return _pairs(
            [("Health Status", dev["health"]), ("Error Code", "NA"), ("Error Information", "NA")]
        )
    infos = str(dev["error_info"]).split("\n")
    text = _pairs([("Health Status", dev["health"]), ("Error Code", " ".join(codes))])
    text += f"\t{'Error Information':<30} : {infos[0]}\n"
    for info in infos[1:]:
        text += f"\n\t{' ':<30} : {info}\n"
    return text


def render_usages(dev: dict[str, Any], processes: list[dict[str, Any]]) -> str:
    """``npu-smi info -t usages -i N`` on a 910B: no DDR, HBM and core usage per chip."""
    used = hbm_used_mb(dev, processes)
    busy = any(p["device"] == dev["id"] for p in processes)
    head = _pairs([("NPU ID", dev["id"]), ("Chip Count", 1)]) + "\n"
    return head + _pairs(
        [
            ("DDR Capacity(MB)", 0),
            ("DDR Usage Rate(%)", 0),
            ("DDR Hugepages Total(page)", 0),
            ("DDR Hugepages Usage Rate(%)", 0),
            ("HBM Capacity(MB)", HBM_TOTAL_MB),
            ("HBM Usage Rate(%)", used * 100 // HBM_TOTAL_MB),
            ("Aicore Usage Rate(%)", 0),
            ("Aivector Usage Rate(%)", 0),
            ("Aicpu Usage Rate(%)", 0),
            ("Ctrlcpu Usage Rate(%)", 3 if busy else 0),
            ("DDR Bandwidth Usage Rate(%)", 0),
            ("HBM Bandwidth Usage Rate(%)", 0),
            ("NPU Utilization(%)", 0),
            ("Aicube Usage Rate(%)", 0),
            ("Chip ID", 0),
        ]
    )


def vdie_id(dev: dict[str, Any]) -> str:
    """A chip's VDie ID as npu-smi prints it: five words of 8 hex digits (the real layout:
    Ascend/mind-cluster docs/en/faultdiag/user_guide/03_collecting_logs.md, ``npu-smi info
    -i ${device_id} -c 0 -t board``: ``VDie ID : 42C711D4 20B03704 4A10C8D4 14CC040A
    D2102003``); made up per card here, stable for a card id."""
    n = int(dev["id"])
    return " ".join(f"{(0x42C711D4 + n * 0x1F3 + i * 0x10203) & 0xFFFFFFFF:08X}" for i in range(5))


def render_board(dev: dict[str, Any], chip: bool) -> str:
    """``npu-smi info -t board -i N`` (the card) or ``... -c C`` (the chip)."""
    if chip:
        return _pairs(
            [
                ("NPU ID", dev["id"]),
                ("Chip ID", 0),
                ("Chip Type", "Ascend"),
                ("Chip Name", dev["name"]),
                ("Chip Version", "V1"),
                ("Board ID", "0x33"),
                ("PCB ID", "NA"),
                ("BOM ID", 1),
                ("VDie ID", vdie_id(dev)),
                ("NDie ID", f"27{dev['id']:02X}6594 20401010 4E10C8D4 14CC040A A4102003"),
                ("Chip Position ID", dev["id"]),
                ("PCIe Bus Info", dev["bus_id"]),
                ("Firmware Version", FIRMWARE_VERSION),
            ]
        )
    return _pairs(
        [
            ("NPU ID", dev["id"]),
            ("Software Version", DRIVER_VERSION),
            ("Firmware Version", FIRMWARE_VERSION),
            ("Compatibility", "OK"),
            ("Board ID", "0x33"),
            ("PCB ID", "A"),
            ("BOM ID", 1),
            ("PCIe Bus Info", dev["bus_id"]),
            ("Slot ID", dev["id"]),
            ("Class ID", "NA"),
            ("PCI Vendor ID", "0x19E5"),
            ("PCI Device ID", "0xD802"),
            ("Subsystem Vendor ID", "0x0200"),
            ("Subsystem Device ID", "0x0100"),
            ("Chip Count", 1),
        ]
    )


ECC_FIELDS = (
    ("HBM Single Bit Error Count", "single_bit"),
    ("HBM Double Bit Error Count", "double_bit"),
    ("HBM Single Bit Aggregate Total Err Cnt", "single_bit_total"),
    ("HBM Double Bit Aggregate Total Err Cnt", "double_bit_total"),
    ("HBM Single Bit Isolated Pages Count", "single_bit_isolated"),
    ("HBM Double Bit Isolated Pages Count", "double_bit_isolated"),
)
"""``printf_hbm_ecc_info``'s lines in order, with the device state's counter for each."""


def render_ecc(dev: dict[str, Any]) -> str:
    """``npu-smi info -t ecc -i N`` on a 910B card, as ``show_ascend_card_info`` with
    ``show_ascend_chip_ecc_info`` prints it (npucli ``npu_card_info.c``, ``npu_chip_info.c``,
    ``npu_info_print.c``): the card header in ``%-40s`` pairs, no DDR lines on a 910B, the HBM
    counters, the two next-isolated counts of a 910B, then the chip's id and a blank line."""
    ecc: dict[str, int] = dev.get("ecc") or {}

    def line(name: str, value: object) -> str:
        return f"\t{name:<40} : {value}\n"

    text = line("NPU ID", dev["id"]) + line("Chip Count", 1) + "\n"
    text += "".join(line(name, int(ecc.get(key, 0))) for name, key in ECC_FIELDS)
    text += line("HBM Single Bit Next-Isolated Pages Count", 0)
    text += line("HBM Double Bit Next-Isolated Pages Count", 0)
    return text + line("Chip ID", 0) + "\n"


USAGE = "Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n"
"""What ``npu-smi info`` prints after a bad option (mind-cluster kg_parse capture)."""

HELP = """\
Usage: npu-smi <Command|-h|-v> [Options...]

npu-smi Command:
\t-h            This command's help information
\t--help        This command's help information
\t-v            Show npu-smi version information
\tinfo          Show hardware details
\tset           Modify device configuration properties
\tclear         Clear device information
\tupgrade       Upgrade MCU firmware
"""
"""``npu-smi`` with no or an unknown command (npucli/src/npu_smi.c ``npu_help_main``)."""
