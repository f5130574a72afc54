"""Nothing stays invisible (issue 14): an error no rule knows is still an ``unrecognised``
finding when its line has no logging header but states a failure as programs print one, and
when it is an indented ERROR line that continues nothing (a posted log cut to that line).
A logged traceback's own lines stay part of it. The lines are the development corpus's
(tests/corpus/dev/failures.jsonl, the ids and issues named), scanned with no rule loaded so
that only the unrecognised pass can see them."""

from __future__ import annotations

import dataclasses

import pytest

from ascend_doctor.core.events import Category, LogChunk, Severity
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules.unrecognised import error_units

NO_RULES = dataclasses.replace(load_rules(), text=())


def unknown(text: str, offset: int = 0) -> list[str]:
    engine = Engine(NO_RULES, clock=lambda: 0.0, matcher="re")
    chunk = LogChunk("x.log", "server", offset, text.encode(), first_line=1)
    return [
        f.captures["message"]
        for f in engine.scan(chunk)
        if f.category == Category.UNRECOGNISED and f.severity >= Severity.WARNING
    ]


@pytest.mark.parametrize(
    "line",
    [
        "Failed to import torch_npu.",  # d-0024, vllm-ascend #166
        "Failed to parse config file: /path/to/acl.json",  # d-0601, hicann/runtime FAQ
        # d-0067, vllm-ascend #2976
        "Aicore kernel execute failed, device_id=2, stream_id=2, report_stream_id=2, "
        "task_id=42014, flip_num=6, fault kernel_name=reshape_and_cache_200000000,",
        "kernel_macros.h:24:10: fatal error: 'cstdint' file not found",  # d-0183, vllm-ascend #3135
        "undefined reference to `aclrtGetVersion'",  # d-0602, hicann/runtime FAQ
        # d-0311, vllm-ascend's docs (FAQ)
        "failed to register layer: ApplyLayer exit status 1 stdout: stderr: archive/tar: "
        "invalid tar header",
        # d-0178, vllm-ascend #2725 (cut after its first sentence)
        "..[ERROR] the socversion Ascend910B1 of bin package does not match the current "
        "device socverison Ascend310P3.",
        # d-0080, vllm-ascend #211 (an AttributeError's text alone, as its title)
        "module 'torch_npu' has no attribute '_npu_flash_attention'",
        # d-0323, hicann/ge's user guide (cut before its versions)
        "E19999 The opp version of the model does not match the current opp run package",
    ],
)
def test_a_stated_failure_without_a_header_is_seen(line: str) -> None:
    assert unknown(line + "\n") == [line]


ISOLATED = [
    # d-0033, vllm-ascend #2396
    "(VllmWorker rank=0 pid=1273) ERROR 08-28 07:44:50 [multiproc_executor.py:492]         "
    "The argument is invalid.Reason: rtGetDevMsg execute failed, reason=[context pointer null]",
    # d-0098, vllm-ascend #3479
    "(EngineCore_DP0 pid=3132) ERROR 10-15 16:32:16 [core.py:708]         Possible Cause: "
    "Available memory is insufficient.",
    # d-0193, vllm-ascend #302
    "ERROR 03-11 14:48:04 engine.py:387]        GELib::InnerInitialize failed.[FUNC:Initialize]"
    "[FILE:gelib.cc][LINE:177]",
]


@pytest.mark.parametrize("line", ISOLATED)
def test_an_indented_error_line_that_continues_nothing_is_seen(line: str) -> None:
    info = "(APIServer pid=1) INFO 08-28 07:44:50 [api_server.py:1] vLLM API server version 0.11\n"
    assert len(unknown(line + "\n")) == 1
    assert len(unknown(info + line + "\n")) == 1


@pytest.mark.parametrize("line", ISOLATED)
def test_an_indented_error_line_after_an_error_line_continues_it(line: str) -> None:
    head = line[: line.index("]") + 2]
    text = head + "RuntimeError: something failed\n" + line + "\n"
    assert [u.first for u in error_units(text.encode())] == [0]


# d-1161, vllm-ascend #4051: four workers' ERROR tracebacks interleaved line by line, cut before
# rank 1's CANN code line; only its TraceBack lines are in view
INTERLEAVED = [
    "(Worker_TP1_EP1 pid=940664) ERROR 11-07 06:32:37 [multiproc_executor.py:671]         "
    "TraceBack (most recent call last):",
    "(Worker_TP3_EP3 pid=940666) ERROR 11-07 06:32:37 [multiproc_executor.py:671]   File "
    '"/home/wxs/vllm/vllm/model_executor/custom_op.py", line 44, in forward',
    "(Worker_TP0_EP0 pid=940663) ERROR 11-07 06:32:37 [multiproc_executor.py:671]            "
    "^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    "(Worker_TP1_EP1 pid=940664) ERROR 11-07 06:32:37 [multiproc_executor.py:671]        "
    "MoeDistributeDispatchV2 do tiling failed, ret is -1.",
    "(Worker_TP3_EP3 pid=940666) ERROR 11-07 06:32:37 [multiproc_executor.py:671]     "
    "return self._forward_method(*args, **kwargs)",
    "(Worker_TP1_EP1 pid=940664) ERROR 11-07 06:32:37 [multiproc_executor.py:671]        "
    "Check NnopbaseExecutorDoTiling(executor) failed",
]


def test_indented_error_lines_whose_head_is_not_in_view_are_seen_once() -> None:
    # the lines above the first one that states an error are only more of the record's body
    # (a CANN TraceBack header, a frame, a caret line): it continues nothing in view; the
    # line after it that says failed continues it
    text = "\n".join(INTERLEAVED) + "\n"
    assert [m.split("]")[-1].strip() for m in unknown(text)] == [
        "MoeDistributeDispatchV2 do tiling failed, ret is -1."
    ]
    info = "(APIServer pid=1) INFO 11-07 06:32:30 [api_server.py:1] vLLM API server version\n"
    assert len(unknown(info + text)) == 1


def test_indented_error_lines_under_their_head_stay_in_its_record() -> None:
    head = INTERLEAVED[0][: INTERLEAVED[0].index("]") + 2] + "EZ9999: Inner Error!\n"
    text = head + "\n".join(INTERLEAVED) + "\n"
    assert [u.first for u in error_units(text.encode())] == [0]


# d-1160, vllm-ascend #2732: a CANN block at vLLM's ERROR header (first lines of it)
CANN_BLOCK = [
    "EZ9999: Inner Error!",
    "EZ9999: [PID: 191741] 2025-09-03-19:05:48.642.164 cos shape is invalid.[FUNC:GetShapeAttrs"
    "Info][FILE:kv_rms_norm_rope_cache_tiling.cpp][LINE:298]",
    "        TraceBack (most recent call last):",
    "       KvRmsNormRopeCache do tiling failed, ret is -1.",
]


@pytest.mark.parametrize(
    "prefix",
    [
        "ERROR 09-03 19:05:48 [multiproc_executor.py:596] ",
        # as posted
        "(VllmWorker TP6 pid=191741) ERROR 09-03 19:05:48 [multiproc_executor.py:596] ",
        "(VllmWorker rank=0 pid=1273) ERROR 09-03 19:05:48 [multiproc_executor.py:596] ",
        "[rank0]: ERROR 09-03 19:05:48 [multiproc_executor.py:596] ",
        "2026-12-01T10:00:00.123456789Z stderr F ERROR 09-03 19:05:48 [multiproc_executor.py:596] ",
        "ERROR 09-03 19:05:48 multiproc_executor.py:596] ",  # vLLM's older header
        "(pid=1, ip=10.0.0.5) ",
    ],
)
def test_a_cann_block_is_one_unit_whatever_its_lines_carry(prefix: str) -> None:
    text = "".join(prefix + line + "\n" for line in CANN_BLOCK)
    units = error_units(text.encode())
    assert [(u.first, u.last) for u in units] == [(0, text.rindex(prefix))]


def test_a_chunk_read_later_may_continue_the_one_before() -> None:
    # the daemon reads a growing file in pieces: the first line of a later piece may be the
    # tail of a block the piece before held, so it is no error of its own
    assert unknown(ISOLATED[0] + "\n", offset=4096) == []
    assert len(unknown(ISOLATED[0] + "\n", offset=0)) == 1


@pytest.mark.parametrize(
    "line",
    [
        # b-0083 (vllm-ascend #754): a line of Python source a logged traceback quotes; the
        # others are lines of the same traceback shape (vLLM v1 core.py, in its ERROR header)
        "ERROR 05-19 02:31:42 [core.py:396]     super().__init__(vllm_config, executor_class, "
        "log_stats,",
        'ERROR 05-19 02:31:42 [core.py:396]     raise RuntimeError("Engine core initialization '
        'failed. "',
        "ERROR 05-19 02:31:42 [core.py:396]     engine_core = EngineCoreProc(*args, **kwargs)",
        'ERROR 05-19 02:31:42 [core.py:396]   File "/vllm/v1/engine/core.py", line 390, in run',
        "ERROR 05-19 02:31:42 [core.py:396]     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    ],
)
def test_quoted_python_source_is_no_error(line: str) -> None:
    assert unknown(line + "\n") == []


def test_a_traceback_source_line_that_says_failed_stays_in_its_traceback() -> None:
    # tests/fixtures/incidents/kv-cache-startup.log: the API server's traceback, raw
    text = (
        "(APIServer pid=728) Traceback (most recent call last):\n"
        '(APIServer pid=728)   File "/vllm/v1/engine/utils.py", line 878, in '
        "wait_for_engine_startup\n"
        '(APIServer pid=728)     raise RuntimeError("Engine core initialization failed. "\n'
        "(APIServer pid=728) RuntimeError: Engine core initialization failed. See root cause "
        "above. Failed core proc(s): {'EngineCore_DP0': 1}\n"
    )
    found = unknown(text)
    assert len(found) == 1 and found[0].startswith("RuntimeError: Engine core")


@pytest.mark.parametrize(
    "line",
    [
        # the packs' fallback traps (rules/packs/*.yaml no_match examples) as a log without
        # their logging header shows them
        "Failed to import optional kernels with ImportError('/x/libfoo.so: undefined symbol: "
        "aclnnFoo'); falling back to the reference implementation",
        "Failed to send data to tcp://10.0.0.2:30001 after 1 retries, retrying",
        "RFork transfer failed: Transfer failed to: 10.0.0.2:25389, clean up and fall back to "
        "default loader",
        # an indented ERROR line that says itself it is harmless
        "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:702]     This error can be safely "
        "ignored.",
    ],
)
def test_a_failure_the_program_recovers_from_is_no_error(line: str) -> None:
    assert unknown(line + "\n") == []


def test_a_compiler_worker_reporting_its_parents_exit_is_no_error() -> None:
    # vllm-ascend #19: printed dozens of times at every shutdown, after vLLM's "Terminating
    # local vLLM worker processes"
    line = "[ERROR] TBE Subprocess[task_distribute] raise error[], main process disappeared!"
    assert unknown(line + "\n") == []
    assert unknown("(RayTrainWorker pid=82395) " + line + "\n") == []


@pytest.mark.parametrize(
    "line",
    [
        # d-0308, vllm-ascend #1615 (torch._dynamo's graph break, printed with no traceback)
        "torch._dynamo.exc.Unsupported: call_function DelayGraphBreakVariable() "
        "[TensorVariable()] {}",
        # rendered from triton/runtime/errors.py (OutOfResources) and torch/_inductor/exc.py
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: "
        "262144, Hardware limit: 196608.",
        "torch._inductor.exc.LoweringException: AssertionError: x",
        # rendered from requests/exceptions.py and websockets/exceptions.py: classes of an
        # ``exceptions`` module whose names do not say Error
        "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='example.org', port=443): "
        "Read timed out. (read timeout=10)",
        "websockets.exceptions.ConnectionClosed: no close frame received or sent",
        # d-0195, vllm-ascend #476 (setuptools' pkg_resources, pip's vendored copy)
        "pip._vendor.pkg_resources.ContextualVersionConflict: (numpy 2.2.4 (/usr/local/lib),"
        " Requirement.parse('numpy==1.26.4'), {'vllm-ascend'})",
    ],
)
def test_a_class_of_an_exception_module_printed_alone_is_seen(line: str) -> None:
    # its name says nothing (no Error, Exception, Failed), its module does: '.exc.', '.errors.',
    # '.exceptions.'
    assert unknown(line + "\n") == [line]


@pytest.mark.parametrize(
    "line",
    [
        "INFO 01-01 00:00:00 [x.py:1] torch._dynamo.exc.Unsupported is caught, graph break",
        '  File "/usr/lib/python3/site-packages/torch/_dynamo/exc.py", line 317, in unimplemented',
        "see torch._dynamo.exc.Unsupported for the reasons a graph breaks",
        "errors.Timeout: a bare module is no package's exception module",
        "exceptions.Timeout: nor is this one",
    ],
)
def test_a_mention_of_an_exception_module_is_no_error(line: str) -> None:
    assert unknown(line + "\n") == []


@pytest.mark.parametrize(
    "line",
    [
        # d-0832 (hicann/runtime EE1001 reference): CANN's text without its code
        "The argument is invalid.Reason: Invalid device ID 8. Set drv devId to 8. The valid"
        " device range is [0, 7).",
        # d-0842, d-0847 (hicann/runtime error-code reference): "%s failed. Reason: %s."
        "MemCopySync failed. Reason: The current thread 198840 is in the capture state and the"
        " current operation cannot be performed.",
        "rtsIpcMemImportByKey failed. Reason: The driver version capacity is insufficient.",
        # d-0844 (hicann/runtime FAQ): "error code = N", spaces around the sign
        "An error occurs on the device(chipId:0, dieId:0), the serial number is 3, the error is"
        " aivec error error, core id is 0, error code = 95, dump info: pc start: 0x1",
        # d-0801 (vllm-ascend's installation): GNU make's failed recipe
        "gmake: *** [Makefile:286: vllm_ascend_C] Error 2",
    ],
)
def test_cann_texts_and_make_failures_without_a_header_are_seen(line: str) -> None:
    assert unknown(line + "\n") == [line]


@pytest.mark.parametrize(
    "line",
    [
        "Connection closed. Reason: the peer finished its work",
        "make[1]: Leaving directory '/vllm-workspace/vllm-ascend/build'",
        "Stream sync failed. Reason: timeout, retrying",
    ],
)
def test_a_reason_that_names_no_failure_is_no_error(line: str) -> None:
    assert unknown(line + "\n") == []


@pytest.mark.parametrize(
    "line",
    [
        # d-0804, d-0806 (vllm-ascend's installation): a nested build indents pip's and
        # CMake's errors
        "  ERROR: Failed building wheel for vllm_ascend",
        "      CMake Error at CMakeLists.txt:14 (project):",
    ],
)
def test_a_build_tools_indented_error_is_seen(line: str) -> None:
    assert unknown(line + "\n") == [line.strip()]


def test_an_indented_error_word_inside_a_traceback_is_part_of_it() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "setup.py", line 3, in <module>\n'
        '    ERROR: "quoted source"\n'
        "ValueError: bad\n"
    )
    assert len(unknown(text)) == 1
