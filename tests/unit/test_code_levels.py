"""A catalogued code is evidence only where its line reports a failure (issue 14): not in a
line whose header says INFO or DEBUG, not in a CANN plog WARNING (a CANN component logs a
failed operation at ERROR, one it works around at WARNING), and not in another WARNING that
says it goes on another way."""

from __future__ import annotations

import pytest

from ascend_doctor.rules.catalogue import load_catalogues
from ascend_doctor.rules.codes import CodeIndex

INDEX = CodeIndex(load_catalogues())
PLOG = "[{level}] HCCL(1595259,python):2026-01-06-15:38:29.881.877 [tuner.cc:120] [1595259]"


def _codes(line: str) -> list[tuple[str, str]]:
    return [(h.entry.kind, h.entry.code) for h in INDEX.scan(line.encode())]


@pytest.mark.parametrize(
    "line",
    [
        # HCCL_WARNING("[HcclTunerInit] plugin init failed, ret[%d], fall back to CostModel.")
        PLOG.format(level="WARNING") + "[HcclTunerInit] plugin init failed, ret[5], fall back "
        "to CostModel.",
        # HCCL_WARNING("[FilterCmByHcclAlgo] HcclGetHcclAlgo failed, ret[%d], try env variable.")
        PLOG.format(level="WARNING") + "[FilterCmByHcclAlgo] HcclGetHcclAlgo failed, ret[9], "
        "try env variable.",
        PLOG.format(level="INFO") + "[Tuner] getCollInfo failed, ret[9], ignore plugin "
        "modification.",
        PLOG.format(level="EVENT") + "call trace: hcclRet -> 9",
        # RT_LOG(RT_LOG_WARNING, "DeviceReOpen driver does not support, ret=%d, devId=%u.")
        "[WARNING] RUNTIME(4242,python3):2026-01-06-15:38:29.881.877 [device.cc:310]4242 "
        "ReOpen:DeviceReOpen driver does not support, ret=207000, devId=0.",
        "INFO 06-03 14:53:54 [worker.py:88] aclrtSynchronizeStream after abort: error code is "
        "507035, which is expected",
        "WARNING 06-03 14:53:54 [worker.py:88] aclnnFoo failed, error code is 561103, falling "
        "back to the native implementation",
    ],
)
def test_a_code_in_a_notice_line_is_no_evidence(line: str) -> None:
    assert _codes(line) == []


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (PLOG.format(level="ERROR") + "[Wait][LinksEstablishCompleted] is failed. ret[9].", "9"),
        ("[W compiler_depend.ts:487] Warning: NPU warning, error code is 507048[Error]:", "507048"),
        ("        wait for compute device to finish failed, runtime result = 507035.", "507035"),
        ("RuntimeError: call aclnnFoo failed, detail:EZ9999: Inner Error!", "EZ9999"),
    ],
)
def test_a_code_in_an_error_line_or_a_line_without_a_header_stays_evidence(
    line: str, code: str
) -> None:
    assert code in {c for _, c in _codes(line)}


def test_the_level_is_read_per_line_in_a_chunk() -> None:
    text = (
        PLOG.format(level="WARNING")
        + "[Tuner] BuildCommInfo failed, ret[9].\n"
        + PLOG.format(level="ERROR")
        + "[Tuner] BuildCommInfo failed, ret[9].\n"
    )
    hits = list(INDEX.scan(text.encode()))
    assert [text.encode().count(b"\n", 0, h.start) for h in hits] == [1]
