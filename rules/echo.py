"""Lines that echo requests back (vLLM's request logger, its engine-failure input dump): a
prompt may quote any error, so such a line is never evidence of one.
"""

from __future__ import annotations

from ascend_doctor.core import regex
from ascend_doctor.rules.parse import REQUEST_LOG, Parsed, parse

ECHO_LOGGERS = regex.compile(r"(?:^|/)dump_input\.py:")
"""vLLM loggers that echo requests back: ``dump_input.py`` dumps the scheduler output (request
ids, token counts, sampling parameters) at ERROR level after an engine failure; the failure
itself is the traceback that follows."""


_ECHO_WORDS = regex.compile(
    rb"Received request |Received raw HTTP request |Generated response |Request |dump_input\.py:"
)
"""Words every echo holds: each ``REQUEST_LOG`` form starts with one, the dump names its file.
A line without any is no echo, and is not parsed to find out."""


def is_request_log(line: bytes) -> bool:
    """True for lines that echo requests back: vLLM's request logger (prompts and outputs)
    and its engine-failure input dump."""
    if _ECHO_WORDS.search(line) is None:
        return False
    return echoed(line, parse(line))


def may_echo(data: bytes, start: int, end: int) -> bool:
    """False when ``data[start:end]`` holds none of an echo's words (no copy is made)."""
    return _ECHO_WORDS.search(data, start, end) is not None


def echoed(line: bytes, p: Parsed) -> bool:
    """``line``, whose fields are ``p``, echoes a request: a ``REQUEST_LOG`` form at its
    message (each starts ``Re`` or ``Ge``), or vLLM's input dump (``ECHO_LOGGERS``)."""
    if p.header == "vllm" and "dump_input.py:" in p.logger and ECHO_LOGGERS.search(p.logger):
        return True
    return (
        line.startswith((b"Re", b"Ge"), p.message)
        and REQUEST_LOG.match(line, p.message) is not None
    )


__all__ = ["ECHO_LOGGERS", "echoed", "is_request_log", "may_echo"]
