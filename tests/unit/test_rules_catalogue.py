"""Code catalogues: loaded with their sources, checked, and codes found in every printed form."""

from pathlib import Path

import pytest

from ascend_doctor.core.errors import RuleError
from ascend_doctor.core.events import Category, LogChunk, Role
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules.catalogue import LEVELS, check_catalogues, load_catalogues
from ascend_doctor.rules.codes import CodeIndex

CATS = load_catalogues()
INDEX = CodeIndex(CATS)
ENGINE = Engine(load_rules(), clock=lambda: 0.0)


def codes(line: str) -> list[tuple[str, str]]:
    return [(h.entry.kind, h.entry.code) for h in INDEX.scan(line.encode())]


def test_every_entry_has_a_source_and_a_known_category() -> None:
    _, problems = check_catalogues()
    assert problems == []
    assert len(CATS) > 1000
    for table in CATS.by_kind.values():
        for entry in table.values():
            assert entry.sources and all(s.startswith("https://") for s in entry.sources)
            assert entry.category in set(Category)


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: NPU function error: aclrtSynchronizeStream, error code is 507035",
        "RuntimeError: ACL stream synchronize failed, error code:507035",
        "wait for compute device to finish failed, runtime result = 507035.[FUNC:x][LINE:1]",
        "rtKernelLaunchWithHandleV2 failed: 507035",
        "aclrtLaunchKernelWithHostArgs failed, return: 507035",
        "[drv api] halMemAlloc failed, ErrCode=507035, desc=[x]",
        "launch failed, ret=507035",
        "error_code: 507035",
        "[Error]: The vector core execution is abnormal.",
        "aclrtSynchronizeStream returned ACL_ERROR_RT_VECTOR_CORE_EXCEPTION",
    ],
)
def test_one_code_in_every_form(line: str) -> None:
    assert ("acl", "507035") in codes(line)


def test_codes_by_name_and_names_that_are_not_codes() -> None:
    assert codes("HcclAllReduce returned HCCL_E_TIMEOUT") == [("hccl", "9")]
    assert codes("ret[HCCL_E_TCP_CONNECT]") == [("hccl", "11")]
    # a longer identifier, an unknown name, the name inside a word: no code
    assert codes("ACL_ERROR_RT_VECTOR_CORE_EXCEPTION_COUNT=3") == []
    assert codes("ACL_ERROR_NO_SUCH_THING") == []
    assert codes("MY_HCCL_E_TIMEOUT_MS=10") == []


def test_runtime_reason_texts_name_their_code() -> None:
    found = codes("rtDeviceSynchronizeWithTimeout execution failed, reason=lost heartbeat[FUNC:x]")
    assert ("acl", "507010") in found
    assert ("acl", "507014") in codes("rtEventQueryStatus execute failed, reason=[aicore timeout]")


def test_the_desc_and_hex_retcode_forms_read_the_reason() -> None:
    # hicann/runtime errcode_manage.cc GetErrorDesc: "ErrCode=%d, desc=[%s], InnerCode=0x%x"
    line = (
        "[ERROR] RUNTIME(846,python):2025-04-23-09:25:08.279.940 [api_c_device.cc:23]846 "
        "rtGetDeviceCount:ErrCode=507899, desc=[driver error:internal error], InnerCode=0x7020010"
    )
    assert [h.printed for h in INDEX.scan(line.encode())] == [
        "507899",
        "driver error:internal error",
    ]
    # the text names the code when the number beside it is one the catalogue lacks
    assert codes("rtFoo:ErrCode=999999, desc=[aicore timeout], InnerCode=0x1") == [
        ("acl", "507014")
    ]
    assert codes("ErrCode=507000, desc=[runtime internel error], InnerCode=0x70f0001") == [
        ("acl", "507000"),
        ("acl", "507000"),
    ]
    # davinci_kernel_task.cc / stream.cc: "retCode=%#x, [%s]" with the TS error's text
    assert codes("Kernel task happen error, retCode=0x31, [vector core exception].") == [
        ("acl", "507035")
    ]
    assert codes("Stream Synchronize failed, stream_id=3, retCode=0x91, [aicpu timeout].") == [
        ("acl", "507017")
    ]
    # a desc the catalogue does not hold is no code (channel_entity.cpp's statistics line)
    assert codes("entity statistic info: desc=[queue 3], HcclImprobe=[succ:1, fail:0]") == []


def test_other_kinds() -> None:
    assert ("cann", "EL0004") in codes("[PID: 1] 2026-01-01 Memory_Allocation_Failure(EL0004): x")
    assert ("cann", "EI0002") in codes("EI0002: [PID: 13075] 2025-06-25-10:45:23 The wait")
    assert ("hccl", "11") in codes(
        "HCCL function error: HcclGetRootInfo(&hcclID), error code is 11"
    )
    assert ("hccl", "9") in codes("[Wait][LinksEstablishCompleted] is failed. ret[9].")
    assert ("device_fault", "80E01801") in codes("Error Code                     : 80E01801")
    assert ("device_fault", "80E18005") in codes("event_id=0x80e18005, device 3")
    assert ("dcmi", "-8020") in codes("dcmi module initialize failed. ret is -8020")
    # HCCL's plog result: module 5, submodule HCOM, HcclResult 9 (hicann/hccl log.h)
    assert ("hccl", "9") in codes("[AllReduce][Result]errNo[0x0000000005010009] hcclComm error")
    assert ("hccl", "1") in codes("[EnvConfig]errNo[0x0000000005000001] In init env variable")
    assert codes("ptr[0x0000000012e08360] errNo[0x00000000070a0009]") == []


def test_unknown_numbers_are_not_codes() -> None:
    assert codes("listening on port 8000, ret=123456") == []
    assert codes("Load graph failed, error code:1343225857") == []


def test_device_fault_level_drives_remediation() -> None:
    entry = CATS.get("device_fault", "80E01801")
    assert entry is not None and entry.level in LEVELS
    reset = CATS.get("device_fault", "80E18005")  # HBMC parity error: RestartNPU
    assert reset is not None and reset.level == "RestartNPU"
    assert [a.name for a in reset.remediation[0]] == ["reset_device", "restart"]


def test_a_code_finding_names_the_code_and_its_device() -> None:
    line = "        Device[3] lost heartbeat.[FUNC:SyncTask][FILE:direct_hwts_engine.cc][LINE:407]"
    data = (line + "\n" + "wait failed, runtime result = 507010.[FUNC:x]\n").encode()
    found = ENGINE.scan(LogChunk("x", "plog", 0, data))
    assert {f.category for f in found} == {Category.DEVICE_FAULT}


def test_generic_code_yields_to_specific_in_a_block() -> None:
    block = (
        "EZ9999: Inner Error!\n"
        "EZ9999: [PID: 838] 2025-09-04-09:50:11.954.378 The error from device(chipId:6, dieId:0),"
        " serial number is 8, there is an exception of aivec error, core id is 40, error code = 0"
        "[FUNC:ProcessStarsCoreErrorInfo][FILE:device_error_core_proc.cc][LINE:303]\n"
    )
    (f,) = ENGINE.scan(LogChunk("x", "server", 0, block.encode()))
    assert f.category == Category.AICORE_ERROR and f.role == Role.ROOT


def test_a_generic_root_cause_is_not_hidden_by_a_symptom_quoting_it() -> None:
    # the engine-death wording around the import error is a specific symptom; the import
    # error is a generic root cause and stays, ranked before the symptom
    line = (
        "(EngineCore_DP0 pid=1) ERROR 01-01 00:00:00 [core.py:1] RuntimeError: Worker failed"
        " with error 'ImportError: initialization failed', please check the stack trace above\n"
    )
    found = ENGINE.scan(LogChunk("x", "server", 0, line.encode()))
    assert {(f.category, f.role) for f in found} == {
        (Category.ENV_MISMATCH, Role.ROOT),
        (Category.ENGINE_DEAD, Role.SYMPTOM),
    }


def test_a_generic_root_cause_yields_to_a_specific_one() -> None:
    line = "ImportError: libatb.so: cannot open shared object file: No such file or directory\n"
    found = ENGINE.scan(LogChunk("x", "server", 0, line.encode()))
    assert [f.rule for f in found] == ["cann-nnal-libatb-missing"]


def test_bad_catalogue_is_refused_with_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(
        "kind: acl\ncodes:\n"
        "  - {code: 999999, category: nonsense, meaning: x, source: 'https://x'}\n"
        "  - {code: 999998, category: npu_oom, meaning: y}\n"
        "  - {code: 507035, category: npu_oom, meaning: z, source: 'https://x'}\n"
    )
    _, problems = check_catalogues([tmp_path])
    text = "\n".join(problems)
    assert "unknown category 'nonsense'" in text
    assert "no 'source'" in text
    assert "duplicate acl code 507035" in text
    assert f"{tmp_path / 'site.yaml'}:" in text
    with pytest.raises(RuleError):
        load_catalogues([tmp_path])


def test_a_site_catalogue_adds_codes(tmp_path: Path) -> None:
    (tmp_path / "catalogues").mkdir()
    (tmp_path / "catalogues" / "site.yaml").write_text(
        "kind: acl\ncodes:\n"
        "  - {code: 599001, category: device_fault, severity: critical, role: root,\n"
        "     meaning: Site-specific fault., source: 'https://example.invalid/runbook'}\n"
    )
    engine = Engine(load_rules([tmp_path]), clock=lambda: 0.0)
    (f,) = engine.scan(LogChunk("x", "server", 0, b"boom, error code is 599001\n"))
    assert f.category == Category.DEVICE_FAULT and f.rule == "code:acl:599001"


def test_meanings_read_without_empty_printf_arguments() -> None:
    entry = CATS.get("cann", "EJ0002")
    assert entry is not None and "%s" not in entry.meaning
    assert entry.meaning == "The network port is down."
