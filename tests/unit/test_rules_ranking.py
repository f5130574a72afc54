"""Root causes across a chain: the cause first, then what it caused."""

from pathlib import Path

import pytest
import yaml

from ascend_doctor.core.events import Category, LogChunk
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules.ranking import Ranked, first_cause, rank_causes

RULES = load_rules()
DEV = Path(__file__).parents[1] / "corpus" / "dev" / "incidents"


def findings(text: str, source: str = "server"):  # type: ignore[no-untyped-def]
    engine = Engine(RULES, clock=lambda: 0.0)
    return engine.scan(LogChunk("x.log", source, 0, text.encode(), first_line=1))


def first_category(text: str, source: str = "server") -> Category | None:
    """The category of the cause ``diagnose`` names first in ``text``."""
    cause = first_cause(findings(text, source))
    return None if cause is None else cause.category


def test_an_import_problem_comes_before_the_error_it_causes() -> None:
    text = (
        "ERROR 01-01 00:00:01 [core.py:1] NotImplementedError: There is no available ascend "
        "quantizer.\n"
        "ModuleNotFoundError: No module named 'vllm_ascend.quantization.w8a8'\n"
        "ERROR 01-01 00:00:02 [core.py:2] EngineCore failed to start.\n"
    )
    assert first_category(text) == Category.ENV_MISMATCH


def test_the_first_ranks_failure_before_the_other_ranks_timeouts() -> None:
    text = (
        "[rank1]: RuntimeError: NPU function error: aclrtSynchronizeStream, error code is "
        "507035\n"
        "EI0002: [PID: 2] 2025-01-01-00:00:00.000.000 The wait execution of the Notify register "
        "times out. Reason: The Notify register has not received the Notify record from remote "
        "rank: [1].\n"
        "[rank0]:[E324 13:00:25.4 compiler_depend.ts:574] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkHCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for "
        "1 ms\n"
    )
    assert first_category(text) == Category.AICORE_ERROR


def test_the_failing_ranks_error_before_the_watchdogs_printed_ahead_of_it() -> None:
    """Another rank's watchdog gives up and prints first; the aicore timeout on the device
    that stopped the collective is the cause (vllm-ascend#4972, as posted)."""
    text = (
        "[rank7]:[E1212 12:10:10.131512730 compiler_depend.ts:1675] [Rank 7] HCCL watchdog "
        "thread terminated with exception:\n"
        "[ERROR] 2025-12-12-12:10:10 (PID:402, Device:7, RankID:-1) ERR02005 DIST internal "
        "error\n"
        "[285] [2025-12-12 12:10:10:644] torch.distributed: [ERROR] [479] Find exception when "
        "finishedNPUExecutionInternal, query:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:59"
        " NPU function error: acl::AclQueryEventRecordedStatus(event_, &currStatus), error code "
        "is 507014\n"
        "[Error]: The aicore execution times out.\n"
    )
    assert first_category(text) == Category.AICORE_ERROR


def test_a_busy_device_before_the_driver_queries_that_fail_on_it() -> None:
    """A second server on a card another one holds (vllm-ascend#2542, as posted): the
    driver's 'resource occupied' (87) explains the failed device-type query with the same
    code, which reads as a driver or version problem, and the generic 507899 beside it."""
    text = (
        "[ERROR] RUNTIME(278,python3):2025-08-26-03:01:17.587.916 [driver.cc:65]278 "
        "GetDeviceCount:Call drvGetDevNum, drvRetCode=87.\n"
        "[ERROR] RUNTIME(278,python3):2025-08-26-03:01:17.587.983 [api_c_device.cc:23]278 "
        "rtGetDeviceCount:ErrCode=507899, desc=[driver error:internal error], "
        "InnerCode=0x7020010\n"
        "ERROR 08-26 03:01:18 [engine.py:458]         halGetDeviceInfo get device type version "
        "failed , ret:87[FUNC:Init][FILE:config_manager.cpp][LINE:61]\n"
    )
    assert first_category(text) == Category.DEVICE_BUSY


def test_the_device_fault_before_the_runtime_errors_on_it() -> None:
    text = (
        "RuntimeError: NPU function error: aclrtSynchronizeStream, error code is 507035\n"
        "[ERROR] RUNTIME(4242,python3):2026-12-02-12:00:01.201.339 [direct_hwts_engine.cc:407]4250 "
        "SyncTask:Device[3] lost heartbeat.\n"
    )
    assert first_category(text, "plog") == Category.DEVICE_FAULT


def test_a_generic_code_yields_to_the_specific_cause_beside_it() -> None:
    """The driver's 'resource occupied' (87, device_busy) and the runtime's generic 507899
    ('driver internal error', catalogued device_fault) that echoes it: the card is held by
    another process, not faulty, so the cause is device_busy (a reset would be wrong)."""
    text = (
        "[ERROR] RUNTIME(278,python3):2025-08-26-03:01:17.587.916 [driver.cc:65]278 "
        "GetDeviceCount:Call drvGetDevNum, drvRetCode=87.\n"
        "RuntimeError: NPU function error: aclrtGetDeviceCount, error code is 507899\n"
    )
    found = findings(text)
    assert {f.category for f in found} >= {Category.DEVICE_BUSY, Category.DEVICE_FAULT}
    cause = first_cause(found)
    assert cause is not None and cause.category == Category.DEVICE_BUSY
    # alone, the generic code is still the cause it names
    alone = first_cause(findings(text.split("\n", 1)[1]))
    assert alone is not None and alone.category == Category.DEVICE_FAULT


def test_driver_and_runtime_heartbeat_loss_are_one_cause_driver_first() -> None:
    text = (
        "[ERROR] [drv_soft_fault] [soft_fault_heartbeat 120] Heartbeat lost! (device=3; ret=-110)\n"
        "[ERROR] RUNTIME(4242,python3):2026-12-02-12:00:01.201.339 [direct_hwts_engine.cc:407]4250 "
        "SyncTask:Device[3] lost heartbeat.\n"
        "wait for compute device to finish failed, runtime result = 507010.\n"
    )
    items = [Ranked(f, None, (0, f.offset)) for f in findings(text, "plog")]
    causes = rank_causes(items)
    assert len(causes) == 1
    assert causes[0][0].finding.rule == "drv-soft-fault-heartbeat-lost"
    assert len(causes[0]) == 3


def test_cascades_keep_their_time_order() -> None:
    oom = findings("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n")[0]
    env = findings("ModuleNotFoundError: No module named 'torch_npu'\n")[0]
    items = [Ranked(oom, 1000.0, (0, 0)), Ranked(env, 5000.0, (0, 100))]
    assert [c[0].finding.category for c in rank_causes(items)] == [
        Category.NPU_OOM,
        Category.ENV_MISMATCH,
    ]


def test_a_device_fault_logged_later_still_explains_the_errors_on_that_device() -> None:
    # the driver's heartbeat line lands minutes after the runtime error (another cascade)
    aicore = findings(
        "RuntimeError: NPU function error: aclrtSynchronizeStream, error code is 507035\n"
    )
    heartbeat = "[ERROR] [drv_soft_fault] [soft_fault_heartbeat 120] Heartbeat lost!"
    fault = findings(heartbeat + " (device=3; ret=-110)\n", "plog")
    env = findings("ModuleNotFoundError: No module named 'torch_npu'\n")
    items = [Ranked(aicore[0], 1000.0, (0, 0)), Ranked(fault[0], 1300.0, (1, 0))]
    assert rank_causes(items)[0][0].finding.category == Category.DEVICE_FAULT
    # a cause as far up the chain keeps its place
    items = [Ranked(env[0], 1000.0, (0, 0)), Ranked(fault[0], 1300.0, (1, 0))]
    assert [c[0].finding.category for c in rank_causes(items)] == [
        Category.ENV_MISMATCH,
        Category.DEVICE_FAULT,
    ]


@pytest.mark.parametrize("incident", sorted(p.name for p in DEV.iterdir()))
def test_dev_incidents_root_cause_first(incident: str) -> None:
    meta = yaml.safe_load((DEV / incident / "meta.yaml").read_text())
    cause = first_cause(findings((DEV / incident / "log.txt").read_text()))
    assert cause is not None and cause.category.value == meta["root_cause_category"]
