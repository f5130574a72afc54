"""HcclResult codes in the forms torch_npu's older checks and HCCL Test print them
(rules/codes.py _HCCL), looked up in the HCCL catalogue (issue 14)."""

from __future__ import annotations

import pytest

from ascend_doctor.core.events import Category, LogChunk
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules.catalogue import load_catalogues
from ascend_doctor.rules.codes import CodeIndex

INDEX = CodeIndex(load_catalogues())
ENGINE = Engine(load_rules(), clock=lambda: 0.0)


def codes(line: str) -> list[tuple[str, str]]:
    return [(h.entry.kind, h.entry.code) for h in INDEX.scan(line.encode())]


@pytest.mark.parametrize(
    ("line", "code"),
    [
        # Ascend/pytorch v5.0.rc2.alpha002-pytorch1.11.0 HCCLUtils.hpp HCCL_CHECK_ERROR, 2nd line
        (" HCCL error, error code is 12.  [error]: Roce connect failed.", "12"),
        # the same check quoted on one line
        (
            "[Rank 1] checkHcclComms found HcclComms vector 0,1 got ERROR via"
            " HcclGetCommAsyncError : HCCL error in: ProcessGroupHCCL.cpp:2030, error code is 21",
            "21",
        ),
        ("RuntimeError: HCCL error in: HCCLUtils.cpp:115, error code is 9", "9"),
        # Ascend/pytorch 9e73e70 HCCLUtils.cpp checkForHcclError
        ("Failed to get HCCL error code: 4", "4"),
        # HCCL Test's HCCLCHECK (CANN tools/hccl_test)
        ("hccl interface return err ./common/src/hccl_test_common.cc:538, retcode: 11", "11"),
        ("hccl interface return errreturn err ./common/src/hccl_test.cc:63, retcode: 9", "9"),
    ],
)
def test_hccl_result_in_older_torch_npu_and_hccl_test_forms(line: str, code: str) -> None:
    assert ("hccl", code) in codes(line)


def test_not_hccl_results() -> None:
    # a six-digit ACL code after "HCCL error in" is not an HcclResult; an unknown retcode
    assert ("hccl", "50") not in codes("HCCL error in: x.cpp:1, error code is 507048")
    assert codes("hccl interface return err ./common/src/hccl_test.cc:538, retcode: 70") == []
    assert codes("INFO retcode: 9 for the last call of my script") == []


def test_retcode_7_keeps_its_specific_rule() -> None:
    line = b"hccl interface return err ./common/src/hccl_test_common.cc:538, retcode: 7\n"
    found = ENGINE.scan(LogChunk("x", "server", 0, line))
    assert [f.category for f in found] == [Category.DEVICE_BUSY]


def test_retcode_codes_categorise_the_line() -> None:
    line = b"hccl interface return err ./common/src/hccl_test_common.cc:538, retcode: 12\n"
    found = ENGINE.scan(LogChunk("x", "server", 0, line))
    assert [f.category for f in found] == [Category.HCCL_LINK_ERROR]
    line = b" HCCL error, error code is 9.  [error]: Timeout.\n"
    found = ENGINE.scan(LogChunk("x", "server", 0, line))
    assert [f.category for f in found] == [Category.HCCL_TIMEOUT]
