"""Errors no rule explains become template-clustered `unrecognised` findings."""

import pytest

from ascend_doctor.core.events import Category, LogChunk, Severity
from ascend_doctor.rules import Engine, load_rules

RULES = load_rules()


def scan(text: str, source: str = "server") -> list:  # type: ignore[type-arg]
    engine = Engine(RULES, clock=lambda: 0.0)
    return engine.scan(LogChunk("x.log", source, 0, text.encode(), first_line=1))


HEAD = "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:{s:02d} [core.py:702] "
TRACEBACK = (
    HEAD
    + "EngineCore failed to start.\n"
    + HEAD
    + "Traceback (most recent call last):\n"
    + HEAD
    + '  File "/x/y.py", line 3, in f\n'
    + HEAD
    + "    frobnicate(layer)\n"
    + HEAD
    + "KeyError: 'model.layers.{n}.mlp'\n"
)


def test_an_unknown_traceback_is_one_unrecognised_finding_with_its_exception() -> None:
    found = scan(TRACEBACK.format(s=1, n=3))
    un = [f for f in found if f.category == Category.UNRECOGNISED]
    assert len(un) == 1
    (f,) = un
    assert f.severity == Severity.ERROR and f.remediation == ()
    assert f.captures["message"] == "KeyError: 'model.layers.3.mlp'"
    assert f.evidence[0].text.endswith("KeyError: 'model.layers.3.mlp'")
    assert f.evidence[0].line == 5
    assert any("Traceback" in e.text for e in f.evidence)
    assert [g.rule for g in found if g.category != Category.UNRECOGNISED] == [
        "vllm-engine-core-failed-to-start"
    ]


def test_an_unknown_error_repeated_100_times_is_one_template() -> None:
    text = "".join(TRACEBACK.format(s=i % 60, n=i) for i in range(100))
    un = [f for f in scan(text) if f.category == Category.UNRECOGNISED]
    assert len(un) == 100
    assert len({f.captures["template_id"] for f in un}) == 1
    assert len({f.captures["message"] for f in un}) == 100  # the exact text is kept


def test_an_explained_error_leaves_nothing_unrecognised() -> None:
    text = (
        "ERROR 08-28 02:33:28 [core.py:634] Traceback (most recent call last):\n"
        '  File "/x.py", line 1, in f\n'
        "ERROR 08-28 02:33:28 [core.py:634] RuntimeError: ACL stream synchronize failed, "
        "error code:507035\n"
    )
    assert [f.category for f in scan(text)] == [Category.AICORE_ERROR]


def test_warnings_and_request_logs_never_alarm() -> None:
    text = (
        "WARNING 08-21 23:55:29 [_custom_ops.py:20] Failed to import from vllm._C with "
        "ModuleNotFoundError(\"No module named 'vllm._C'\")\n"
        "INFO 08-28 02:33:28 [logger.py:41] Received request chatcmpl-1: prompt: 'ERROR "
        "Traceback RuntimeError: NPU out of memory. Tried to allocate 2 GiB EL0004', params: x\n"
        "WARNING 04-21 21:20:24 [arg_utils.py:1603] This may causeOOM during the initial memory "
        "profiling phase\n"
    )
    assert [f for f in scan(text) if f.severity >= Severity.WARNING] == []


def test_unknown_cann_block_is_one_finding() -> None:
    text = (
        "EZ9999: Inner Error!\n"
        "EZ9999: [PID: 1] 2025-01-01-00:00:00.000.000 something nobody knows[FUNC:F][LINE:1]\n"
        "        TraceBack (most recent call last):\n"
        "        inner call failed[FUNC:G][FILE:g.cc][LINE:2]\n"
    )
    (f,) = scan(text)
    assert f.category == Category.UNRECOGNISED and len(f.evidence) >= 2


def test_python_exceptions_in_cann_logs_are_not_units() -> None:
    assert scan("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n", "plog") == []


def test_an_exception_naming_the_block_below_is_one_unit_with_it() -> None:
    text = (
        "[rank0]: RuntimeError: call aclnnFoo failed, detail:EZ9999: Inner Error!\n"
        "[rank0]: EZ9999: [PID: 62938] 2025-05-27-06:52:12.455.807 something odd happened."
        "[FUNC:Foo][FILE:foo.cc][LINE:1218]\n"
        "[rank0]:         TraceBack (most recent call last):\n"
    )
    found = scan(text)
    assert [f.category for f in found] == [Category.UNRECOGNISED]
    # the code stays readable in the template; numbers are masked
    assert found[0].summary.startswith("EZ9999: [PID: <NUM>]")


def test_engine_death_after_its_own_clean_shutdown_is_expected() -> None:
    # vllm-ascend docs/source/installation.md: an offline run ends like this
    tail = (
        "ERROR 05-12 11:36:01 [core_client.py:704] Engine core proc EngineCore died"
        " unexpectedly, shutting down client.\n"
    )
    clean = (
        "(EngineCore pid=970) INFO 05-12 11:36:00 [core.py:1201] Shutdown initiated (timeout=0)\n"
        "(EngineCore pid=970) INFO 05-12 11:36:00 [core.py:1224] Shutdown complete\n" + tail
    )
    assert scan(clean) == []
    assert [f.category for f in scan(tail)] == [Category.ENGINE_DEAD]


@pytest.mark.parametrize(
    "text",
    [
        # headers of other loggers (lmdeploy's name-then-level, Ray's, MindIE's brackets, glog)
        "2025-06-01 10:00:00,123 - lmdeploy - ERROR - engine.py:100 - Engine loop failed: x",
        "2025-06-01 10:00:00,123\tERROR worker.py:12 -- Unhandled error (suppress with x)",
        "[2025-01-01 10:00:00.000+08:00] [1234] [5678] [llm] [model] [ERROR] [r.py:12] : boom",
        "E1203 10:00:00.123456 12345 rdma_context.cpp:12] ibv_poll_cq returned status 12",
        "[2025-01-01 10:00:00.123456] [error] [2486] [operation_base.cpp:276] setup failed",
        # the level word alone after an ISO time (Rust's tracing, camem), logfmt
        "2025-06-01T10:00:00.123456Z ERROR store::client: the segment is gone",
        'time="2025-06-01T10:00:00Z" level=error msg="the segment is gone"',
        # an inner line of a CANN error block whose code line was not posted
        "        [Init][Frob]frob init failed![FUNC:InitFrob][FILE:frob_adapter.cc][LINE:42]",
        # errors that say so without a header
        "Error: the model store is not mounted",
        "Exception: the frobnicator failed",
        "mytool: error: the queue is gone",
        "[Error]: The stream is in an unknown state.",
        "InnerRun:torch_npu/csrc/framework/OpParamMaker.cpp:281 NPU function error: "
        "aclrtMemcpy, error code is 100999",
        '{"object":"error","message":"boom","type":"InternalServerError","param":null,"code":500}',
        # crashes: glibc's heap checks, shells reporting a signal
        "double free or corruption (out)",
        "free(): invalid pointer",
        "*** Error in `python3': corrupted size vs. prev_size: 0x00007f00",
        "Floating point exception (core dumped)",
        "Killed",
        # a traceback whose exception has no Error/Exception in its name
        'Traceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\n'
        "triton.runtime.errors.OutOfResources: out of resource: shared memory",
    ],
)
def test_errors_in_other_formats_are_unrecognised(text: str) -> None:
    found = [f for f in scan(text + "\n") if f.severity >= Severity.WARNING]
    assert [f.category for f in found] == [Category.UNRECOGNISED]


def test_a_traceback_ending_in_an_odd_exception_is_one_unit_named_by_it() -> None:
    text = (
        HEAD.format(s=1)
        + "Traceback (most recent call last):\n"
        + HEAD.format(s=1)
        + '  File "/x/y.py", line 3, in f\n'
        + HEAD.format(s=1)
        + "mypkg.errors.Unsupported: layer kind\n"
    )
    (f,) = scan(text)
    assert f.captures["message"] == "mypkg.errors.Unsupported: layer kind"


@pytest.mark.parametrize(
    "text",
    [
        '{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}',
        "INFO 05-01 10:00:00 [x.py:1] request failed, error code is 400 (retrying)",
        "2025-06-01 10:00:00,123 - lmdeploy - INFO - engine.py:100 - error: none",
        "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)",
        "aclrtSetDevice returned, error code is 0",
    ],
)
def test_near_misses_do_not_alarm(text: str) -> None:
    assert [f for f in scan(text + "\n") if f.severity >= Severity.WARNING] == []


@pytest.mark.parametrize(
    "line",
    [
        "Aug  1 08:38:31 localhost kernel: [ 1197.584409] [ascend] [ERROR] [hdcdrv] "
        "[hdcdrv_session_close 300] session close failed, ret=-5",
        "[ 1197.5] INFO: task python3:4242 blocked for more than 120 seconds.",
        "[ 12.000001] pcieport 0000:00:01.0: AER: Uncorrected (Non-Fatal) error received",
        "[ 12.000002] pcieport 0000:00:01.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), "
        "type=Transaction Layer, (Requester ID)",
    ],
)
def test_kernel_fault_reports_are_unrecognised(line: str) -> None:
    assert [f.category for f in scan(line + "\n", "host")] == [Category.UNRECOGNISED]


@pytest.mark.parametrize(
    "line",
    [
        "Aug  1 08:38:31 localhost kernel: [ 1197.5] usb 1-1: new high-speed USB device number 2",
        "[ 5.1] ACPI Error: AE_NOT_FOUND, While resolving a named reference",
        "[ 9.1] [ascend] [INFO] [devmng] device 3 ready",
        # drivers/pci/pcie/aer.c: an error the link corrected (issue 14)
        "[ 12.1] pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0",
        "[ 12.1] pcieport 0000:00:01.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
        "(Receiver ID)",
    ],
)
def test_kernel_noise_is_not(line: str) -> None:
    assert scan(line + "\n", "host") == []


def test_an_engine_death_does_not_explain_the_unknown_error_before_it() -> None:
    text = (
        HEAD.format(s=1)
        + "Traceback (most recent call last):\n"
        + HEAD.format(s=1)
        + '  File "/x/y.py", line 3, in f\n'
        + HEAD.format(s=1)
        + "ValueError: the frobnicator is out of range\n"
        + HEAD.format(s=1)
        + "EngineCore encountered a fatal error.\n"
    )
    assert {f.category for f in scan(text)} == {Category.UNRECOGNISED, Category.ENGINE_DEAD}


@pytest.mark.parametrize(
    "line",
    [
        "Error executing job with overrides: ['trainer.n_gpus_per_node=8']",
        "Exception in thread Thread-3 (run):",
        "    | RuntimeError: the frobnicator stopped",
    ],
)
def test_sentences_that_announce_an_error_are_unrecognised(line: str) -> None:
    assert [f.category for f in scan(line + "\n")] == [Category.UNRECOGNISED]


def test_an_error_line_that_says_it_is_harmless_is_no_finding() -> None:
    line = "ERROR 05-01 10:00:00 [x.py:1] Failed to read the cpu topology; this can be ignored.\n"
    assert scan(line) == []


_SERVING = "(APIServer pid=1234) ERROR 12-05 10:00:00 [serving_completion.py:140] "
_TOO_LONG = (
    "ValueError: This model's maximum context length is 8192 tokens. However, you requested"
    " 9000 tokens (8990 in the messages, 10 in the completion). Please reduce the length of"
    " the messages or completion."
)
_FRAMES = [
    "Traceback (most recent call last):",
    '  File "/vllm/entrypoints/openai/serving_completion.py", line 128, in create_completion',
    "    raise ValueError(",
]


@pytest.mark.parametrize("headed", [True, False], ids=["vllm-format", "bare-traceback"])
def test_a_request_modules_logged_exception_is_one_request_failure(headed: bool) -> None:
    """vLLM's serving modules report a bad request with ``logger.exception("Error in
    preprocessing prompt inputs")`` (vllm/entrypoints/openai/serving_completion.py): the
    ERROR line and then its traceback, one record. vLLM's NewLineFormatter puts the header on
    every line; other formatters, and many posted logs, do not. Either way it is one failed
    request (info), never a server error."""
    body = [*_FRAMES, _TOO_LONG]
    lines = [_SERVING + "Error in preprocessing prompt inputs"]
    lines += [(_SERVING + b) if headed else "(APIServer pid=1234) " + b for b in body]
    found = scan("\n".join(lines) + "\n")
    assert [(f.category, f.severity) for f in found] == [(Category.UNRECOGNISED, Severity.INFO)]
    assert found[0].captures["message"].startswith("ValueError: This model's maximum context")


def test_a_traceback_after_another_modules_error_line_is_still_an_error() -> None:
    lines = [
        "(EngineCore_DP0 pid=77) ERROR 12-05 10:00:00 [core.py:700] EngineCore failed to start.",
        *("(EngineCore_DP0 pid=77) " + b for b in _FRAMES),
        "(EngineCore_DP0 pid=77) ValueError: some unknown failure of the engine",
    ]
    found = scan("\n".join(lines) + "\n")
    assert Severity.ERROR in {f.severity for f in found}
