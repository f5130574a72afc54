"""Category decisions of the env_mismatch and model_config_error packs (issue 14).

Each case is a wording rendered from the source that prints it (the rules' YAML comments name
the repository, commit and file); the test pins what the line means to an operator, so that a
later pattern cannot move it to another category or make a benign look-alike alarm.
"""

from __future__ import annotations

import pytest

from ascend_doctor.core.events import LogChunk, Severity
from ascend_doctor.rules import Engine, load_rules

RULES = load_rules()


def categories(line: str) -> set[str]:
    """Categories of the findings of warning severity or above for one server-log line."""
    engine = Engine(RULES, matcher="re", clock=lambda: 0.0)
    found = engine.scan(LogChunk("server.log", "server", 0, (line + "\n").encode()))
    return {f.category.value for f in found if f.severity >= Severity.WARNING}


@pytest.mark.parametrize(
    ("line", "category"),
    [
        # aclInit fails before any device is opened: the environment cannot initialise CANN
        ("aclInit failed, ret = 107000", "env_mismatch"),
        (
            "RuntimeError: Initialize:torch_npu/csrc/core/npu/sys_ctrl/npu_sys_ctrl.cpp:224"
            " NPU function error: aclInit, error code is 107000",
            "env_mismatch",
        ),
        # vLLM's troubleshooting guide: the model file failed to import (dependencies)
        (
            "ValueError: Model architectures ['Qwen2ForCausalLM'] failed to be inspected."
            " Please check the logs for more details.",
            "env_mismatch",
        ),
        # an unsupported dtype on this chip is fixed by the launch's --dtype
        (
            "EZ1001: self not implemented for DT_BFLOAT16, should be in dtype support list"
            " [DT_FLOAT16,DT_FLOAT,].",
            "model_config_error",
        ),
        # any vLLM config ValueError in pydantic's wording
        (
            "  Value error, data_parallel_size_local (2) must be <= data_parallel_size (1)"
            " [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]",
            "model_config_error",
        ),
        (
            "ValueError: GPU memory utilization must be less than 1.0. Got 1.2.",
            "model_config_error",
        ),
        ("RuntimeError: Failed to find function aclrtIpcOpenEventHandle", "env_mismatch"),
        (
            "ImportError: /usr/local/Ascend/ascend-toolkit/latest/lib64/libhccl.so:"
            " cannot read file data: Is a directory",
            "env_mismatch",
        ),
    ],
)
def test_category(line: str, category: str) -> None:
    assert category in categories(line)


@pytest.mark.parametrize(
    "line",
    [
        # torchvision's image extension is not used by a server (MindCluster quick start)
        "/usr/local/lib/python3.10/site-packages/torchvision/io/image.py:13: UserWarning: Failed"
        " to load image Python extension: '/usr/local/lib/python3.10/site-packages/torchvision/"
        "image.so: undefined symbol: _ZN3c1017RegisterOperatorsD1Ev'If you don't plan on using"
        " image functionality from `torchvision.io`, you can ignore this warning.",
        # torch_npu warn-once fallbacks: the server runs on
        "[W compiler_depend.ts:658] Warning: Failed to find function aclrtDestroyStreamForce"
        " (function operator())",
        "[W compiler_depend.ts:1] Warning: The ACL_DEVICE_SYNC_TIMEOUT does not take effect. If"
        " you want to enable this env, please upgrade CANN to the matching version."
        " (function operator())",
        # an API request's validation error is a client's problem
        "  Value error, messages must not be empty [type=value_error, input_value={'model':"
        " 'qwen', 'messages': []}, input_type=dict]",
        "WARNING 01-01 00:00:00 [platform.py:1] For better performance please set"
        " VLLM_ASCEND_ENABLE_FLASHCOMM1=1",
    ],
)
def test_benign_look_alikes_stay_quiet(line: str) -> None:
    assert not categories(line) & {"env_mismatch", "model_config_error"}
