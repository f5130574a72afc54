"""Errors no rule explains: found, grouped into units, clustered into templates.

An error unit is a Python traceback (header, frames, the exception line), a CANN error
block, a fatal-signal line, or one ERROR/CRITICAL line. A unit that contains no line a
rule or a code explained becomes one ``unrecognised`` finding whose summary is its
template, mined with drain3 after masking numbers, so the same unknown error repeated a
hundred times is one template (``captures["template_id"]``) with the exact text kept as
evidence. Unrecognised findings carry no remediation.

Candidate lines are found with one regex pass over the chunk; Python looks only at them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ascend_doctor.core import regex
from ascend_doctor.rules.blocks import block_around
from ascend_doctor.rules.echo import echoed
from ascend_doctor.rules.lines import parsed_at
from ascend_doctor.rules.parse import (
    CANN_CODE,
    CANN_TRACE,
    CONTINUATION,
    ERROR_WORD,
    EXCEPTION_LINE,
    FAILED_CALL,
    FATAL,
    HOST_FAULT,
    JSON_ERROR,
    TRACEBACK,
    Parsed,
)
from ascend_doctor.rules.stated import (
    CONTINUED_ERROR,
    EXIT_NOISE,
    STATED_ERROR,
    TOOL_ERROR,
    harmless,
    ignorable,
    may_be_fatal,
    may_fail,
    may_state_error,
)

MAX_TRACEBACK_LINES = 400
"""A traceback longer than this is cut: its header no longer waits for an exception line."""

UNIT_KEYS = (
    r"ERROR|CRITICAL|Error|Exception|Exit\b|Interrupt\b|Traceback|what\(\)|Fatal"
    r"|Segmentation fault|\*\*\* SIG|\[E(?:\d{3}| [\w./-]{1,80}:\d+\])|E[0-9A-Z]\d{4}"
    r"|FATAL|Failed|panic|fatal error|level=\"?(?:error|fatal)|terminate called"
    r"|\b[EF](?:\d{4})?[01]\d[0-3]\d [0-2]\d:|error: |error ?code|errno\["
    r"|Killed|Aborted|Bus error|Illegal instruction|Floating point exception|stack smashing"
    r"|double free|free\(\)|malloc\(\)|corrupted (?:size|double)|segfault|general protection"
    r"|BUG: |Kernel panic|blocked for more|lockup|LOCKUP|ardware [Ee]rror|Machine check"
    r"|Bus Error|I/O error|EXT4-fs error|AER: Uncorrected|\[(?:error|fatal|critical)\]"
    r"|\[FUNC:\w|failed|FAILED|undefined reference|has no attribute '|\.exc\.|\.errors\."
    r"|\.exceptions\."
    r"|Reason: |pkg_resources\."
)
"""Words of a line that may be an error line; scanned with the rules in one pass. Only a
prefilter: ``error_units`` parses each line it proposes. glog's header (``E1210 03:24:54.7``,
``E20260608 14:45:44.4``) is proposed by its month, day and hour digits: the header's
digits, colons and dot hold no literal for hyperscan to find, and matching them whole cost a
fifth of a benign scan (issue 18); ``parse`` checks the whole header."""
_CANDIDATE = regex.compile(UNIT_KEYS.encode())


REQUEST_LOGGERS = regex.compile(r"(?:^|/)(?:serving_\w+|serving|protocol)\.py:")
"""vLLM's OpenAI-serving modules log one request's failure at ERROR (a prompt too long, a bad
parameter): the server is fine, so such an unexplained error is reported at info level."""


def _request_logger(logger: str) -> bool:
    """``logger`` is one of ``REQUEST_LOGGERS``; a logger naming neither ``serving`` nor
    ``protocol.py:`` (most) is not searched."""
    return ("serving" in logger or "protocol.py:" in logger) and REQUEST_LOGGERS.search(
        logger
    ) is not None


def _exception_line(msg: bytes) -> bool:
    """``msg`` is a Python exception line: a name that says so (``EXCEPTION``), or a class of
    a package's exception module printed alone (``MODULE_EXCEPTION``); one pattern matches
    either (``EXCEPTION_LINE``)."""
    return EXCEPTION_LINE.match(msg) is not None


_ERRORISH = regex.compile(rb"ERROR|CRITICAL|FATAL|error|fatal|\[[EF][\d ]|[EF]\d{4,8} \d")
"""Every way a header names an error level (``rules/parse.py``: words, glog's and c10's
``E``/``F`` letters, ``level=error``): a line without any is of no error level."""


RECORD_LINES = 40
"""How far back ``_isolated`` looks for the head of the record an indented ERROR line
continues."""


def _isolated(data: bytes, start: int, parsed: dict[int, Parsed], file_start: bool) -> bool:
    """Whether the indented ERROR line at ``start`` continues nothing in view: the ERROR lines
    right above it are only more indented lines that state no error themselves (CANN's
    ``TraceBack (most recent call last):``, a quoted frame, a caret line) back to a line of
    no error level or the start of the file, so the head of its record (the exception, the
    CANN code line) is not there: a posted log cut inside the record, or several workers'
    records interleaved line by line. An indented ERROR line under a head, or under a line
    that states the error, continues it (the next line of a logged traceback or CANN
    message). The first line of a chunk is isolated only when the chunk starts its file (a
    chunk read later may continue what the one before held)."""
    pos = start
    for _ in range(RECORD_LINES):
        if pos == 0:
            return file_start
        prev = data.rfind(b"\n", 0, pos - 1) + 1
        if _ERRORISH.search(data, prev, pos) is None:
            return True  # nothing a header of an error level is written with: not parsed
        line, p = _parsed(data, prev, parsed)
        if p.level not in ("ERROR", "CRITICAL"):
            return True
        msg = line[p.message :]
        if not CONTINUATION.match(msg) or CONTINUED_ERROR.match(msg.lstrip()):
            return False  # the record's head, or a line of it that states the error
        pos = prev
    return False


_WHAT = regex.compile(rb".{0,200}?what\(\): ")
_WARNED_CODE = regex.compile(rb"Warning: E[0-9A-Z]\d{4}: ")


@dataclass(frozen=True, slots=True)
class Unit:
    """One error unit of a chunk."""

    first: int
    """Byte offset of its first line."""
    last: int
    """Byte offset of its last line (the exception line of a traceback)."""
    key_line: int
    """Offset of the line that names the error (exception line, code line, the line)."""
    severe: bool
    """An exception, traceback, CANN error block or fatal signal (not a lone ERROR line)."""
    request: bool = False
    """Logged by vLLM's request-serving code: one request failed, not the server."""


def _line(data: bytes, start: int) -> bytes:
    end = data.find(b"\n", start)
    return data[start : end if end >= 0 else len(data)]


def _traceback_lines(data: bytes) -> set[int]:
    """Starts of the lines of ``data`` that hold ``Traceback``: found in one pass over the
    chunk, not by a search of each candidate line (most hold none)."""
    out = set()
    pos = data.find(b"Traceback")
    while pos >= 0:
        out.add(data.rfind(b"\n", 0, pos) + 1)
        pos = data.find(b"Traceback", pos + 1)
    return out


PER_LINE = 2048
"""A chunk with fewer candidate lines than one per this many bytes has each searched for a
traceback header (a search of a line costs about what a pass over 2 KB does)."""


def _holds_traceback(data: bytes, start: int) -> bool:
    """The line at ``start`` holds ``Traceback``."""
    end = data.find(b"\n", start)
    return data.find(b"Traceback", start, len(data) if end < 0 else end) >= 0


def _candidate_starts(data: bytes) -> Iterator[int]:
    last = -1
    for m in _CANDIDATE.finditer(data):
        start = data.rfind(b"\n", 0, m.start()) + 1
        if start != last:
            last = start
            yield start


ANY_EXCEPTION = regex.compile(rb"(?:[A-Za-z_]\w{0,60}\.){0,8}[A-Za-z_]\w{0,60}(?:: \S|:?\s*$)")
"""The line that ends a traceback names its exception, whatever the name
(``torch._dynamo.exc.Unsupported: ...``, ``StopIteration``)."""


def _parsed(data: bytes, start: int, parsed: dict[int, Parsed]) -> tuple[bytes, Parsed]:
    """The line at ``start`` and its fields, parsed once per chunk (``parsed`` is the memo
    the engine shares between its level check and this pass)."""
    line = _line(data, start)
    return line, parsed_at(data, start, start + len(line), parsed)


def _exception_after(data: bytes, start: int, parsed: dict[int, Parsed]) -> int:
    """Offset of the exception line ending the traceback whose header is at ``start``, or -1
    when the first line after its frames does not look like one (another process's output)."""
    pos = data.find(b"\n", start) + 1
    for _ in range(MAX_TRACEBACK_LINES):
        if pos <= 0 or pos >= len(data):
            return -1
        line, p = _parsed(data, pos, parsed)
        msg = line[p.message :]
        if msg.strip() and p.level not in ("INFO", "DEBUG") and not CONTINUATION.match(msg):
            if TRACEBACK.match(msg) or not ANY_EXCEPTION.match(msg):
                return -1
            return pos
        pos = data.find(b"\n", pos) + 1
    return -1


PYTHON_SOURCES = ("server",)
"""Streams that carry Python output (tracebacks, exception lines); CANN logs carry only
their own ERROR lines and error blocks."""


def error_units(
    data: bytes,
    source: str = "server",
    candidates: Iterable[int] | None = None,
    forced: frozenset[int] = frozenset(),
    parsed: dict[int, Parsed] | None = None,
    file_start: bool = True,
) -> list[Unit]:
    """Every error unit of a chunk of ``source``, in file order. ``candidates`` are the
    starts of the lines ``UNIT_KEYS`` matched, in order (found here when not given);
    ``forced`` are lines holding a catalogued error code, errors whatever their header;
    ``parsed``: lines of the chunk parsed already, by their start (filled in here);
    ``file_start``: the chunk starts its file (see ``_isolated``)."""
    if parsed is None:
        parsed = {}
    python = source in PYTHON_SOURCES
    units: list[Unit] = []
    traceback_at = -1
    request_at = -1
    traceback_lines = 0
    logged_request = False
    covered_to = -1
    found = list(_candidate_starts(data) if candidates is None else candidates)
    # a traceback ends at its exception line even when the exception's name is no keyword
    # no other line is a traceback's header: where candidates are few (a benign chunk) each
    # is searched, else the chunk in one pass (a pass over a 600 MB log costs 0.1 s)
    if len(found) * PER_LINE < len(data):
        holders = {s for s in (*found, *forced) if _holds_traceback(data, s)}
    else:
        holders = _traceback_lines(data)
    if python and holders:
        late = {_exception_after(data, start, parsed) for start in found if start in holders}
        late.discard(-1)
    else:
        late = set()
    extra = forced | late
    for start in sorted(set(found) | extra) if extra else found:
        if start <= covered_to:
            continue
        line, p = _parsed(data, start, parsed)
        if echoed(line, p):
            continue  # echoes of requests (prompts, outputs, the scheduler dump)
        msg = line[p.message :]
        if source == "host":  # the kernel's log: its fault reports and drivers' ERROR lines
            if HOST_FAULT.match(line):
                units.append(Unit(start, start, start, False))
            continue
        if start in forced and traceback_at < 0 and not CANN_CODE.match(msg.lstrip()):
            units.append(Unit(start, start, start, True))
            continue
        if p.level in ("INFO", "DEBUG", "WARNING"):
            # torch_npu reports CANN errors through TORCH_WARN: "Warning: EZ9999: Inner Error!"
            if not (p.level == "WARNING" and _WARNED_CODE.match(msg)):
                continue
            msg = msg[len(b"Warning: ") :]
        if not python and p.header != "plog":
            continue
        if start in holders and TRACEBACK.match(msg):
            if traceback_at < 0:
                traceback_at, traceback_lines, logged_request = start, 0, False
                prev = units[-1] if units else None
                if (
                    prev is not None
                    and prev.request
                    and not prev.severe
                    and prev.last == data.rfind(b"\n", 0, start - 1) + 1
                ):
                    # logger.exception: a request-serving module's ERROR line, then its
                    # traceback (headers on the traceback's lines or not): one record, of
                    # one failed request
                    units.pop()
                    traceback_at, logged_request = prev.first, True
            continue
        if p.level in ("ERROR", "CRITICAL") and _request_logger(p.logger):
            request_at = traceback_at if traceback_at >= 0 else start
        if traceback_at >= 0:
            traceback_lines = data.count(b"\n", traceback_at, start)
            if traceback_lines > MAX_TRACEBACK_LINES:
                traceback_at = -1
        # an exception line may come indented (a chained exception group, a posted quote)
        is_exception = _exception_line(msg.lstrip(b" \t|")) or start in late
        if is_exception and traceback_at >= 0:
            request = logged_request or (request_at == traceback_at and _request_logger(p.logger))
            units.append(Unit(traceback_at, start, start, True, request))
            traceback_at = -1
            continue
        if CANN_CODE.match(msg.lstrip()) and msg[:1] != b"W":
            block = block_around(data, start)
            first, last = block if block else (start, start)
            last_line = data.rfind(b"\n", 0, last) + 1 if last > start else start
            units.append(Unit(first, max(start, last_line), start, True))
            covered_to = last
            continue
        if is_exception or (may_be_fatal(msg) and FATAL.match(msg)):
            last = start
            if msg.startswith(b"terminate called"):
                # the C++ runtime prints the exception's what() on the next line
                nxt = data.find(b"\n", start) + 1
                if 0 < nxt < len(data) and _WHAT.match(_line(data, nxt)):
                    last = covered_to = nxt
            units.append(Unit(start, last, start, True))
            continue
        body = JSON_ERROR.search(msg)
        if body:  # an error response: a 5xx is the server failing, a 4xx one request
            units.append(Unit(start, start, start, False, body.group("code")[:1] == b"4"))
            continue
        if p.level not in ("ERROR", "CRITICAL") and (
            ERROR_WORD.match(msg)
            or (traceback_at < 0 and TOOL_ERROR.match(msg) is not None)
            or (may_fail(msg) and FAILED_CALL.match(msg))
            or (b"[FUNC:" in msg and CANN_TRACE.match(msg))
            or (
                traceback_at < 0
                and not CONTINUATION.match(msg)
                and may_state_error(msg)
                and STATED_ERROR.match(msg)
                and not harmless(msg)
            )
        ):
            units.append(Unit(start, start, start, False))
            continue
        if p.level in ("ERROR", "CRITICAL") and not CONTINUATION.match(msg):
            if ignorable(msg):
                continue  # an ERROR line that says itself it is harmless
            if msg.startswith(b"TBE Subprocess[") and EXIT_NOISE.match(msg):
                continue  # a worker reporting its parent's exit
            units.append(Unit(start, start, start, False, _request_logger(p.logger)))
        elif (
            p.level in ("ERROR", "CRITICAL")
            and traceback_at < 0
            and CONTINUED_ERROR.match(msg.lstrip())
            and _isolated(data, start, parsed, file_start)
            and not harmless(msg)
        ):
            # an indented ERROR line that continues nothing: the one line of a logged message
            # that a log cut, or a quote of it
            units.append(Unit(start, start, start, False, _request_logger(p.logger)))
    return units


__all__ = ["MAX_TRACEBACK_LINES", "UNIT_KEYS", "Unit", "error_units"]
