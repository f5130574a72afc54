"""``npu-smi info -t ecc`` parsed from captured outputs, and the ECC rule's judgement."""

from __future__ import annotations

from pathlib import Path

from ascend_doctor.collectors.npu_smi_ecc import ECC_HEAD, ecc_subjects, npu_id, parse_ecc
from ascend_doctor.core.events import Sample
from ascend_doctor.rules.ecc import RECORDED, RISE, EccWatch

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "npu_smi"

A3_CARD = """\
\tNPU ID                                   : 4
\tChip Count                               : 2

\tHBM Single Bit Error Count               : 3
\tHBM Double Bit Error Count               : 0
\tHBM Single Bit Aggregate Total Err Cnt   : 7
\tHBM Double Bit Aggregate Total Err Cnt   : 0
\tHBM Single Bit Isolated Pages Count      : 0
\tHBM Double Bit Isolated Pages Count      : 0
\tHBM Single Bit Next-Isolated Pages Count : 0
\tHBM Double Bit Next-Isolated Pages Count : 0
\tChip ID                                  : 0

\tHBM Single Bit Error Count               : 0
\tHBM Double Bit Error Count               : 2
\tHBM Single Bit Aggregate Total Err Cnt   : 0
\tHBM Double Bit Aggregate Total Err Cnt   : 2
\tHBM Single Bit Isolated Pages Count      : 0
\tHBM Double Bit Isolated Pages Count      : NA
\tHBM Single Bit Next-Isolated Pages Count : 0
\tHBM Double Bit Next-Isolated Pages Count : 0
\tChip ID                                  : 1

"""
"""Two chips of one card in the layout ``show_ascend_card_info`` prints (values made up)."""


def test_the_910a_capture_reads_the_hbm_counters_of_chip_0() -> None:
    text = (REAL / "ecc-910a-doc.txt").read_text()
    assert npu_id(text) == 1
    assert ECC_HEAD.search(text.encode())
    chips = parse_ecc(text)
    assert list(chips) == [0]
    assert chips[0]["hbm_ecc_double_bit_errors"] == 0
    assert len(chips[0]) == 6  # the DDR lines are not HBM counters


def test_npu_smi_v2_prints_no_chip_lines_and_is_chip_0() -> None:
    chips = parse_ecc((REAL / "ecc-950-doc.txt").read_text())
    assert list(chips) == [0] and chips[0]["hbm_ecc_double_bit_total"] == 0


def test_each_chip_of_a_card_gets_its_own_counters() -> None:
    chips = parse_ecc(A3_CARD)
    assert chips[0]["hbm_ecc_single_bit_total"] == 7
    assert chips[1]["hbm_ecc_double_bit_errors"] == 2
    assert "hbm_ecc_double_bit_isolated_pages" not in chips[1]  # NA is not a number
    assert set(ecc_subjects(4, chips)) == {"npu4.0", "npu4.1"}
    assert set(ecc_subjects(4, {0: chips[0]})) == {"npu4"}


def test_no_counters_is_nothing_read() -> None:
    assert parse_ecc("Invalid card id.\nError parameter of -i\n") == {}


def sample(subject: str, current: int, total: int) -> Sample:
    values = {"hbm_ecc_double_bit_errors": current, "hbm_ecc_double_bit_total": total}
    return Sample("npu_smi", subject, 10.0, values)


def test_a_rise_is_critical_and_a_clean_card_says_nothing() -> None:
    watch = EccWatch()
    assert watch.evaluate(sample("npu0", 0, 0)) is None
    assert watch.evaluate(sample("npu0", 0, 0)) is None
    rise = watch.evaluate(sample("npu0", 2, 2))
    assert rise is not None and rise.rule == RISE and rise.severity.label == "critical"
    assert "2 new uncorrectable (double-bit) HBM ECC errors (2 in all)" in rise.summary
    assert watch.evaluate(sample("npu0", 2, 2)) is None
    # the current count cleared (npu-smi clear): the lifetime total did not grow
    assert watch.evaluate(sample("npu0", 0, 2)) is None


def test_old_errors_are_reported_once_without_steps() -> None:
    watch = EccWatch()
    old = watch.evaluate(sample("npu3", 0, 1))
    assert old is not None and old.rule == RECORDED and old.remediation == ()
    assert old.category.value == "device_fault" and old.severity.label == "warning"
    assert watch.evaluate(sample("npu3", 0, 1)) is None
    assert watch.evaluate(Sample("vllm", "server", 1.0, {"hbm_ecc_double_bit_total": 5})) is None


def test_a_restarted_doctor_knows_the_counts_its_store_kept() -> None:
    watch = EccWatch({"npu3": {"hbm_ecc_double_bit_total": 1}, "npu4": {"health": "OK"}})
    assert watch.evaluate(sample("npu3", 0, 1)) is None  # the same old error: nothing new
    rise = watch.evaluate(sample("npu3", 1, 2))
    assert rise is not None and rise.rule == RISE
    old = watch.evaluate(sample("npu4", 0, 1))  # never seen with counters: reported once
    assert old is not None and old.rule == RECORDED
