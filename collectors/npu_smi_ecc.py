"""``npu-smi info -t ecc -i N``: a card's ECC counters, parsed into sample values.

What npu-smi prints (the driver's npucli source, ``npu_card_info.c`` ``show_ascend_card_info``
with ``npu_chip_info.c`` ``show_ascend_chip_ecc_info`` and ``npu_info_print.c``
``printf_hbm_ecc_info``; captured outputs in ``tests/fixtures/real/npu_smi/ecc-*.txt``):

    NPU ID                                   : 0
    Chip Count                               : 1

    HBM Single Bit Error Count               : 0
    HBM Double Bit Error Count               : 0
    HBM Single Bit Aggregate Total Err Cnt   : 0
    HBM Double Bit Aggregate Total Err Cnt   : 0
    HBM Single Bit Isolated Pages Count      : 0
    HBM Double Bit Isolated Pages Count      : 0
    HBM Single Bit Next-Isolated Pages Count : 0
    HBM Double Bit Next-Isolated Pages Count : 0
    Chip ID                                  : 0

A chip's counters come before its ``Chip ID`` line (several chips on an A3 card; npu-smi v2 on
an Atlas 350 prints no chip lines at all); a 910A also prints ``DDR ...`` lines, a 910B none.
A double-bit error is one the ECC cannot correct: the data it hit is lost and the driver
isolates its page. The single-bit ones were corrected.
"""

from __future__ import annotations

import re

from ascend_doctor.collectors.npu_smi_format import parse_pairs
from ascend_doctor.core import regex

ECC_KEYS = {
    "HBM Single Bit Error Count": "hbm_ecc_single_bit_errors",
    "HBM Double Bit Error Count": "hbm_ecc_double_bit_errors",
    "HBM Single Bit Aggregate Total Err Cnt": "hbm_ecc_single_bit_total",
    "HBM Double Bit Aggregate Total Err Cnt": "hbm_ecc_double_bit_total",
    "HBM Single Bit Isolated Pages Count": "hbm_ecc_single_bit_isolated_pages",
    "HBM Double Bit Isolated Pages Count": "hbm_ecc_double_bit_isolated_pages",
}
"""npu-smi's HBM counter names -> sample value names (the same six NPU Exporter exports as
``npu_chip_info_hbm_ecc_*``: mind-cluster ``component/npu-exporter/collector/metrics/
collector_for_hbm.go``)."""

UNCORRECTABLE = "hbm_ecc_double_bit_errors"
"""The count of uncorrectable errors since the host started or the counters were cleared
(DCMI ``dcmi_get_device_ecc_info``)."""
UNCORRECTABLE_TOTAL = "hbm_ecc_double_bit_total"
"""The card's lifetime count of uncorrectable errors: it only grows."""

ECC_HEAD = regex.compile(rb"^\s*HBM (?:Single|Double) Bit Error Count\s+:", re.M)
"""A line only ``npu-smi info -t ecc`` prints: how ``diagnose`` knows a saved one."""
_CHIP = regex.compile(r"^\s*Chip ID\s*:\s*(\d+)\s*$")
_NPU = regex.compile(r"^\s*NPU ID\s*:\s*(\d+)\s*$", re.M)


def npu_id(text: str) -> int | None:
    """The card the output is about (its ``NPU ID`` line)."""
    m = _NPU.search(text)
    return int(m.group(1)) if m else None


def parse_ecc(text: str) -> dict[int, dict[str, int]]:
    """Each chip's HBM counters by chip id (chip 0 when npu-smi prints no chip lines).

    Counters that are not numbers (``NA`` in a container that may not read them) are left
    out; a chip with none is left out, so an empty result means "nothing read"."""
    chips: dict[int, dict[str, int]] = {}
    block: list[str] = []
    # a last "Chip ID" of its own closes a block npu-smi v2 ends without one (as chip 0)
    for line in [*text.splitlines(), "Chip ID : 0"]:
        m = _CHIP.match(line)
        if m is None:
            block.append(line)
            continue
        values = _counters("\n".join(block))
        block = []
        if values:
            chips.setdefault(int(m.group(1)), values)
    return chips


def _counters(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in parse_pairs(text).items():
        key = ECC_KEYS.get(name)
        if key is not None and value.strip().isdigit():
            out[key] = int(value)
    return out


def ecc_subjects(npu: int, chips: dict[int, dict[str, int]]) -> dict[str, dict[str, int]]:
    """The counters by sample subject: ``npu3`` for a card of one chip, ``npu3.1`` for the
    chips of a card of several (as ``samples_from_info`` names them)."""
    if len(chips) == 1:
        return {f"npu{npu}": next(iter(chips.values()))}
    return {f"npu{npu}.{chip}": values for chip, values in chips.items()}


__all__ = [
    "ECC_HEAD",
    "ECC_KEYS",
    "UNCORRECTABLE",
    "UNCORRECTABLE_TOTAL",
    "ecc_subjects",
    "npu_id",
    "parse_ecc",
]
