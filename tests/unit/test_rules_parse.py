"""Line parsers: prefixes and headers of every source read as fields."""

import pytest

from ascend_doctor.rules.echo import is_request_log
from ascend_doctor.rules.parse import message, parse


@pytest.mark.parametrize(
    ("line", "header", "level", "msg"),
    [
        (
            "(EngineCore_DP0 pid=3132) ERROR 10-15 16:32:16 [core.py:708] EL0004: x",
            "vllm",
            "ERROR",
            "EL0004: x",
        ),
        ("ERROR 03-05 07:15:39 engine.py:387] NPU out of memory.", "vllm", "ERROR", "NPU out"),
        (
            "(EngineCore_1 pid=1) (VllmWorker rank=0 pid=2) ERROR 07-01 08:38:50 [m.py:492] Boom",
            "vllm",
            "ERROR",
            "Boom",
        ),
        (
            "[rank1]:[E324 13:00:25.428029551 compiler_depend.ts:574] [Rank 1] W",
            "c10",
            "ERROR",
            "[Rank",
        ),
        (
            "[ERROR] HCCL(2717288,python3):2025-07-23-03:47:57.070.463 [hccl_socket.cc:100] [1]x",
            "plog",
            "ERROR",
            "[1]x",
        ),
        (
            "[ERROR] 2025-06-03-14:54:23 (PID:8648, Device:0, RankID:-1) ERR00100 PTA call",
            "torch_npu",
            "ERROR",
            "ERR00100",
        ),
        (
            "2026-01-02T03:04:05.1Z stdout F (APIServer pid=1) INFO 09-08 02:54:59 [l.py:44] R",
            "vllm",
            "INFO",
            "R",
        ),
        ("svc-1  | (APIServer pid=145) RuntimeError: x", "", "", "RuntimeError: x"),
        ("(pid=26694, ip=10.0.0.5) INFO 04-29 13:51:22 [__init__.py:44] ok", "vllm", "INFO", "ok"),
        ("2025-03-26 11:48:53 - INFO - vllm_ascend.worker - Loading", "pylog", "INFO", "Loading"),
        ("E1210 03:24:54.778028 2548307 transport.cpp:820] Failed x", "glog", "ERROR", "Failed"),
        ("I20260608 14:45:44.404228 342420 transport.cpp:1119] Connected", "glog", "INFO", "Conn"),
        (
            "2025-06-01 10:00:00,123 - lmdeploy - ERROR - engine.py:100 - Engine loop failed",
            "pylog_name",
            "ERROR",
            "engine.py",
        ),
        ("2025-06-01 10:00:00,123\tERROR worker.py:12 -- Boom", "timed", "ERROR", "Boom"),
        ("[2025-06-01 10:00:00] [ERROR] Boom", "timed", "ERROR", "Boom"),
        ("2025-06-01T10:00:00.5+08:00 [ERROR] Boom", "timed", "ERROR", "Boom"),
        (
            "[2025-01-01 10:00:00.000+08:00] [1234] [5678] [llm] [model] [ERROR] [a.py:12] : x",
            "bracket",
            "ERROR",
            "[a.py",
        ),
        ('time="2025-06-01T10:00:00Z" level=error msg="pull failed"', "logfmt", "ERROR", "msg="),
        ("2025-06-07T08:10:41.790Z ERROR camem: Failed to import x", "bare", "ERROR", "Failed"),
        ("2025-06-01T10:00:00.123456Z ERROR mooncake::store: put failed", "bare", "ERROR", "put"),
        ("2025-06-01T10:00:00.123Z\tWARN\tretrying the connection", "timed", "WARNING", "retry"),
        (
            'INFO:     1.2.3.4:41180 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
            "uvicorn",
            "INFO",
            "1.2",
        ),
    ],
)
def test_headers(line: str, header: str, level: str, msg: str) -> None:
    p = parse(line.encode())
    assert (p.header, p.level) == (header, level)
    assert message(line.encode()).decode().startswith(msg)


def test_plog_module_and_logger() -> None:
    p = parse(
        b"[ERROR] RUNTIME(42,x):2025-11-18-09:33:13.673.818 [api_error.cc:2350]58 SetDevice:x"
    )
    assert (p.module, p.logger) == ("RUNTIME", "api_error.cc:2350")


def test_request_log_lines_are_recognised() -> None:
    line = (
        "(APIServer pid=1) INFO 08-28 02:33:28 [logger.py:41] Received request chatcmpl-1: "
        "prompt: 'why does RuntimeError: NPU out of memory happen?', params: SamplingParams(n=1)"
    )
    assert is_request_log(line.encode())
    assert is_request_log(
        b"INFO 01-01 00:00:00 [logger.py:9] Generated response cmpl-2: output: 'x'"
    )
    assert not is_request_log(b"ERROR 01-01 00:00:00 [core.py:1] Received nothing")


def test_newer_vllm_headers_carry_a_relative_path() -> None:
    line = (
        b"(EngineCore_DP0 pid=3859350) ERROR 10-28 10:45:49 [logging_utils/dump_input.py:76]"
        b" Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[])"
    )
    p = parse(line)
    assert (p.header, p.level, p.logger) == ("vllm", "ERROR", "logging_utils/dump_input.py:76")
    # the engine-failure dump echoes requests: never evidence
    assert is_request_log(line)
    assert is_request_log(b"ERROR 11-04 09:45:23 [dump_input.py:79] Dumping scheduler stats: S(")
    assert not is_request_log(b"ERROR 11-04 09:45:23 [core.py:588] EngineCore encountered a fatal")


def test_older_c10_headers_have_no_timestamp() -> None:
    line = b"[E socket.cpp:472] [c10d] The server socket has failed to listen on any address."
    p = parse(line)
    assert (p.header, p.level, p.logger) == ("c10", "ERROR", "socket.cpp:472")


def test_a_service_line_read_back_from_the_journal_keeps_its_header() -> None:
    # vLLM run as a systemd unit, its output read with journalctl (short and short-iso)
    for prefix in (
        "Dec  7 12:00:00 host vllm[1234]: ",
        "2026-12-07T12:00:00.123456+08:00 h x[9]: ",
    ):
        line = prefix + "(EngineCore_DP0 pid=276) ERROR 09-08 02:55:31 [core.py:702] KeyError: 'x'"
        p = parse(line.encode())
        assert (p.header, p.level, line.encode()[p.message :]) == (
            "vllm",
            "ERROR",
            b"KeyError: 'x'",
        )
    # a time and a level are no journal prefix: camem's own header stays what it is
    p = parse(b"2025-06-07T08:10:41.790Z ERROR camem: Failed to import x")
    assert p.level == "ERROR"
