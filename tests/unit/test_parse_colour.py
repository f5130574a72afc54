"""A header written in colour is the same header (rules/parse.py): vLLM colours the level,
time and file:line when its stream is a terminal (vllm/logging_utils/formatter.py
ColoredFormatter, VLLM_LOGGING_COLOR), and a log captured from one keeps the ANSI sequences.
Unread, such a header made every line headerless: a WARNING quoting an OOM phrase matched a
rule that restarts the server, and an ERROR line's unknown exception was invisible."""

from __future__ import annotations

from ascend_doctor.core.events import LogChunk, Severity
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules.parse import parse

GREY, RESET, RED, YELLOW = "\x1b[90m", "\x1b[0m", "\x1b[31m", "\x1b[33m"
RULES = load_rules()


def coloured(level: str, colour: str, message: str) -> str:
    # ColoredFormatter's fields: the level in its colour, time and file:line in grey
    return (
        f"(EngineCore_DP0 pid=276) {colour}{level}{RESET} {GREY}09-08 02:55:31{RESET} "
        f"{GREY}[core.py:702]{RESET} {message}"
    )


def scan(line: str) -> list[tuple[str, Severity]]:
    engine = Engine(RULES, clock=lambda: 0.0)
    chunk = LogChunk("x.log", "server", 0, (line + "\n").encode(), first_line=1)
    return [(f.rule, f.severity) for f in engine.scan(chunk)]


OOM = (
    "torch.OutOfMemoryError: NPU out of memory. Tried to allocate 512.00 MiB (NPU 3; 60.97 GiB "
    "total capacity; 58.02 GiB already allocated; 58.02 GiB current active; 201.35 MiB free; "
    "59.80 GiB reserved in total by PyTorch)"
)


def test_a_coloured_header_is_read_as_the_plain_one() -> None:
    line = coloured("ERROR", RED, "KeyError: 'model.layers.3.mlp'").encode()
    plain = parse(
        line.replace(RED.encode(), b"").replace(GREY.encode(), b"").replace(RESET.encode(), b"")
    )
    p = parse(line)
    assert (p.header, p.level, p.logger) == (plain.header, plain.level, plain.logger)
    assert (p.header, p.level, p.logger) == ("vllm", "ERROR", "core.py:702")
    assert line[p.message :] == b"KeyError: 'model.layers.3.mlp'"


def test_a_coloured_warning_quoting_an_oom_is_not_the_oom() -> None:
    assert ("torch-npu-oom", Severity.CRITICAL) in scan(coloured("ERROR", RED, OOM))
    assert not any(rule == "torch-npu-oom" for rule, _ in scan(coloured("WARNING", YELLOW, OOM)))


def test_an_unknown_exception_on_a_coloured_error_line_is_seen() -> None:
    found = scan(coloured("ERROR", RED, "KeyError: 'model.layers.3.mlp'"))
    assert found == [("unrecognised", Severity.ERROR)]


def test_a_message_that_starts_in_colour_starts_after_its_sequence() -> None:
    line = coloured("ERROR", RED, f"{RED}worker crashed{RESET}").encode()
    p = parse(line)
    assert line[p.message :] == b"worker crashed" + RESET.encode()
