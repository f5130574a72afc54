"""Category decisions of wordings added for issue 14 (knowledge that generalizes).

Each case is a wording rendered from the source that prints it (the rules' YAML comments and
the catalogue entries name the repository, commit and file); the test pins what the line means
to an operator, so that a later pattern cannot move it to another category or make a benign
look-alike alarm.
"""

from __future__ import annotations

import pytest

from ascend_doctor.core.events import LogChunk, Severity
from ascend_doctor.rules import Engine, Rule, load_rules

RULES = load_rules()


def categories(line: str, source: str = "server") -> set[str]:
    """Categories of the findings of warning severity or above for one line of a stream."""
    engine = Engine(RULES, matcher="re", clock=lambda: 0.0)
    path = "plog-1_20260101000000000.log" if source == "plog" else "server.log"
    found = engine.scan(LogChunk(path, source, 0, (line + "\n").encode()))
    return {f.category.value for f in found if f.severity >= Severity.WARNING}


@pytest.mark.parametrize(
    ("line", "category"),
    [
        # the CANN runtime's reason text for 107030 before hicann/runtime 746be6c
        # (errcode_manage.cc at b86b84e): the operation is not allowed while capturing a graph
        (
            "rtMemcpy execution failed, reason=the current capture mode does not support this"
            " operation[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:61]",
            "graph_capture_error",
        ),
        # GNU make's report of a failed recipe, and CMake's build run by setup.py
        ("make[2]: *** [CMakeFiles/vllm_ascend_C.dir/all] Error 2", "env_mismatch"),
        (
            "subprocess.CalledProcessError: Command '['cmake', '--build', '.', '-j=8',"
            " '--target=vllm_ascend_C']' returned non-zero exit status 2.",
            "env_mismatch",
        ),
        ("collect2: error: ld returned 1 exit status", "env_mismatch"),
        # Mooncake Store's client and its master (kvcache-ai/Mooncake 3b5a594 mooncake-store)
        (
            "E1112 11:16:11.129794 58058 master_client.cpp:370]"
            " RPC call failed: Connection refused",
            "hccl_link_error",
        ),
        (
            "E1112 11:16:11.129794 58058 master_client.cpp:370]"
            " RPC call failed: Connection timed out",
            "hccl_timeout",
        ),
        (
            "E1112 11:16:11.129913 56431 real_client.cpp:927] Failed to mount segment: RPC_FAIL",
            "hccl_link_error",
        ),
        # a device index outside the devices there are (hicann/runtime 681ef76 EE1001 reference)
        (
            "The argument is invalid.Reason: Invalid device ID 8. Set drv devId to 8. The valid"
            " device range is [0, 7).",
            "device_unavailable",
        ),
        # c10d's own ERROR line once no local address would listen
        (
            "[E socket.cpp:472] [c10d] The server socket has failed to listen on any local"
            " network address.",
            "port_in_use",
        ),
        # systemd's journal of the server's unit and zsh's job report (a signal ended it)
        (
            "Mar 01 10:11:12 node1 systemd[1]: vllm.service: Main process exited,"
            " code=dumped, status=11/SEGV",
            "server_crashed",
        ),
        ("zsh: segmentation fault  vllm serve /models/Qwen3-8B", "server_crashed"),
        # vLLM-Ascend's own device checks (vllm_ascend/utils.py) and its additional_config's
        # validation (vllm_ascend/ascend_config.py)
        (
            "ValueError: No NPU devices found or specified in ASCEND_RT_VISIBLE_DEVICES.",
            "device_unavailable",
        ),
        ("ValueError: Unknown dyntra_lb_config keys: ['mode2']", "model_config_error"),
        (
            "ValueError: ShortRequestFirst scheduling cannot be enabled with"
            " profiling_chunk_config. Disable one of them.",
            "model_config_error",
        ),
        # `ray start --block` (ray-project/ray python/ray/scripts/scripts.py)
        ("dashboard_agent [exit code=1]", "server_crashed"),
    ],
)
def test_wording_means(line: str, category: str) -> None:
    assert category in categories(line)


@pytest.mark.parametrize(
    "line",
    [
        "make[1]: Leaving directory '/vllm-workspace/vllm-ascend/build'",
        "[notice] A new release of pip is available: 25.1.1 -> 25.2",
        "Mar 01 10:11:12 node1 systemd[1]: vllm.service: Main process exited, code=killed,"
        " status=15/TERM",
        "I1112 11:16:11.129794 58058 master_client.cpp:300] Mount segment 0x12c2000000"
        " to master succeeded",
        "[W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:29500"
        " (errno: 99 - Cannot assign requested address).",
    ],
)
def test_benign_look_alike_is_quiet(line: str) -> None:
    assert categories(line) == set()


def _rule(rule_id: str) -> Rule:
    return next(r for r in RULES.text if r.id == rule_id)


def test_a_card_health_line_naming_no_device_plans_no_reset() -> None:
    # vllm-ascend's Worker.check_health (worker.py, #6681 and later) logs "query NPU card
    # <local rank> fail: NPU card health status is not OK": the number is a rank, not a
    # device id, so the finding is device_fault but plans nothing; the npu_smi collector's
    # npu-smi-health-not-ok reads the card by its id and plans the reset (decision: helper B)
    line = (
        "(EngineCore_DP0 pid=201) ERROR 02-11 02:57:23 [worker.py:1105]"
        " query NPU card 0 fail: NPU card health status is not OK"
    )
    assert categories(line) == {"device_fault"}
    rule = _rule("npu-card-health-not-ok")
    assert not rule.remediation
    assert rule.subject == "server"
    # the same words at INFO (#6681 logged them so) still report, as nothing is planned
    assert categories(line.replace(" ERROR ", " INFO ")) == {"device_fault"}


def test_ray_gcs_unreachable_is_a_link_between_the_nodes() -> None:
    # Ray's head unreachable from this node is the link between the nodes or the head down,
    # like torch's rendezvous store (c10d-client-socket-connect-failed): hccl_link_error,
    # its "Timed out while waiting for GCS" included, as no timeout to raise would help
    # (decision: helper B); ray-project/ray gcs_rpc_client.h, gcs_utils.py, exceptions.py
    error = (
        "[2026-03-01 22:48:01,851 E 6578 6578] gcs_rpc_client.h:151:"
        " Failed to connect to GCS at address 10.0.0.1:6379 within 5 seconds."
    )
    assert categories(error) == {"hccl_link_error"}
    assert categories(
        "ray.exceptions.RpcError: Timed out while waiting for GCS to become available."
    ) == {"hccl_link_error"}
    # the same words at Ray's W level: a node retrying while the head starts (newer Ray
    # logs the first attempt as a warning); Ray's C++ header is read for its level
    assert categories(error.replace(" E 6578 ", " W 6578 ")) == set()


def test_missing_chat_template_is_the_model_config_even_in_one_refused_request() -> None:
    # A refused request (a 4xx error body) is otherwise info, one bad request; a tokenizer
    # without a chat template refuses every chat request until --chat-template is given, so
    # the body carrying those words is the model's configuration (decision: helper A);
    # vllm-project/vllm vllm/entrypoints/chat_utils.py, transformers tokenization_utils_base.py
    words = (
        "As of transformers v4.44, default chat template is no longer allowed, so you must"
        " provide a chat template if the tokenizer does not define one."
    )
    assert categories(f"ValueError: {words}") == {"model_config_error"}
    body = (
        '{"object":"error","message":"' + words + '","type":"BadRequestError",'
        '"param":null,"code":400}'
    )
    assert categories(body) == {"model_config_error"}
    # the same words at WARNING are no failure
    assert categories(f"WARNING 05-01 10:00:00 [api_server.py:1] {words}") == set()


def test_pip_resolver_giving_up_is_the_environment() -> None:
    # pip's resolver refusing a set of versions is a version mismatch of the stack, whether
    # it names the pair or only its exception (decision: helper A); vllm-project/vllm-ascend#446,
    # pip src/pip/_internal/resolution/resolvelib/factory.py
    assert categories(
        "ERROR: Cannot install torch-npu==2.5.1rc1 and torch>=2.5.1 because these package"
        " versions have conflicting dependencies."
    ) == {"env_mismatch"}
    assert categories(
        "ERROR: ResolutionImpossible: for help visit"
        " https://pip.pypa.io/en/latest/topics/dependency-resolution/"
        "#dealing-with-dependency-conflicts"
    ) == {"env_mismatch"}


def test_numpy_array_allocation_failure_is_host_memory() -> None:
    # numpy's _ArrayMemoryError is a host (CPU) allocation, never the NPU's (decision:
    # helper A); numpy numpy/_core/_exceptions.py
    assert categories(
        "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 1.00 GiB for an array"
        " with shape (1024, 1024, 256) and data type float32"
    ) == {"host_oom"}


def test_torch_npu_refusing_an_environment_value_is_the_serving_configuration() -> None:
    # torch_npu's start-up check of its own environment variables names a value the operator
    # set, like HCCL's EI0001 (hccl-env-config-invalid): model_config_error, not env_mismatch
    # (nothing is missing or of another release) (decision: helper A); Ascend/pytorch
    # torch_npu/csrc/core/npu/register/OptionsManager.cpp
    assert categories("RuntimeError: ASCEND_LAUNCH_BLOCKING should be 0 or 1.") == {
        "model_config_error"
    }
    assert categories("RuntimeError: P2P_HCCL_BUFFSIZE cannot be negative.") == {
        "model_config_error"
    }
    # its warning that falls back to the default is no failure
    assert (
        categories(
            "[W1207 09:31:29.123456789 OptionsManager.cpp:182] Warning: Get env HCCL_EXEC_TIMEOUT"
            " less than 0, so reset it to the default value. (function operator())"
        )
        == set()
    )


def test_hccl_run_failed_is_a_link_error_and_its_timeout_tag_a_timeout() -> None:
    """hcomm's task_exception_handler.cc tags a failed task [RunFailed] (an SDMA error, a
    notify that never came from a dead peer: the link) and a notify wait that ran out of time
    [Timeout]: the tag, not the shared sentence, decides the family."""
    head = (
        "[ERROR] HCCL(2817,python3):2026-03-01-10:11:12.123.456 [task_exception_handler.cc:121]"
        " [3154][TaskExecStage]"
    )
    tail = "[AICPU] Task from HCCL run failed."
    assert categories(head + "[RunFailed]" + tail, "plog") == {"hccl_link_error"}
    assert categories(head + "[Timeout]" + tail, "plog") == {"hccl_timeout"}


def test_el0001_stays_a_device_fault_not_an_unmapped_device_id() -> None:
    """EL0001 (Device_Absent/Abnormal, hicann/runtime error_code.json) is the device itself
    gone or broken, a device fault; the family-level device-id rule (an index out of range, a
    logical id with no physical one) is the configuration's, device_unavailable."""
    assert categories(
        "EL0001: [PID: 1234] 2026-03-01-10:11:12.123.456 Device not found or invalid."
    ) == {"device_fault"}
    assert categories(
        "[ERROR] RUNTIME(1234,python3):2026-03-01-10:11:12.123.456 [api_impl.cc:100] 1234"
        " Invalid device id, deviceId=9, valid range is [0,8).",
        "plog",
    ) == {"device_unavailable"}
