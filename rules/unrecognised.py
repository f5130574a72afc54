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

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ascend_doctor.core import regex
from ascend_doctor.rules.blocks import block_around
from ascend_doctor.rules.drain import Miner
from ascend_doctor.rules.parse import (
    CANN_CODE,
    CANN_TRACE,
    CONTINUATION,
    ECHO_LOGGERS,
    ERROR_WORD,
    EXCEPTION_LINE,
    FAILED_CALL,
    FATAL,
    HOST_FAULT,
    JSON_ERROR,
    REQUEST_LOG,
    TRACEBACK,
    Parsed,
    parse,
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


IGNORABLE = regex.compile(
    rb"(?i:can (?:be )?(?:safely )?ignored?\b|safe to ignore"
    rb"|(?:please|you can|you may) (?:safely )?ignore|is harmless"
    rb"|(?:does|will) not affect (?:the )?(?:result|inference|service|serving))"
)
"""A lone ERROR line that says it is harmless ("... can be ignored", "safe to ignore"): some
libraries log expected conditions at ERROR level and say so."""


FALLBACK = regex.compile(
    rb"(?i:fall(?:ing)? ?back|(?:will |to )?(?:use|using) [^\n]{1,80}? instead"
    rb"|will (?:retry|try again)|retrying|skipp(?:ing|ed)\b|ignor(?:ing|ed)\b|disabl(?:ing|ed)\b)"
)
"""A failure the program recovers from by itself, saying so on the same line ("Failed to
import X, falling back to Y", "... failed, using the default instead", "retrying"): a notice,
not an error, when nothing but its wording says it failed."""


_FALLBACK_WORDS = (b"fall", b"instead", b"retr", b"try again", b"skipp", b"ignor", b"disabl")
"""Words every ``FALLBACK`` phrase holds (lower case): a line with none is searched no more."""


def _exception_line(msg: bytes) -> bool:
    """``msg`` is a Python exception line: a name that says so (``EXCEPTION``), or a class of
    a package's exception module printed alone (``MODULE_EXCEPTION``); one pattern matches
    either (``EXCEPTION_LINE``)."""
    return EXCEPTION_LINE.match(msg) is not None


def _ignorable(msg: bytes) -> bool:
    """The line says itself it is harmless (``IGNORABLE``)."""
    return _may_ignore(msg) and IGNORABLE.search(msg, 0, 2000) is not None


def _harmless(msg: bytes) -> bool:
    """The line says it can be ignored, or that the program goes on another way. The first
    2000 bytes are lowered once for both sets of words (``_may_ignore``, ``_FALLBACK_WORDS``),
    each word tested in turn rather than by a generator."""
    low = msg[:2000].lower()
    if (b"ignore" in low or b"harmless" in low or b"not affect" in low) and IGNORABLE.search(
        msg, 0, 2000
    ) is not None:
        return True
    return (
        b"fall" in low
        or b"instead" in low
        or b"retr" in low
        or b"try again" in low
        or b"skipp" in low
        or b"ignor" in low
        or b"disabl" in low
    ) and FALLBACK.search(msg, 0, 2000) is not None


EXIT_NOISE = regex.compile(
    rb"TBE Subprocess\[\w{1,40}\] raise error\[[^\]\n]{0,200}\], main process disappeared!"
)
"""ERROR lines a process prints because another ended, not a failure of its own: CANN's TBE
compiler workers report their parent's exit at every shutdown, dozens of times, right after
vLLM's "Terminating local vLLM worker processes" (vllm-ascend #19; a crash that ended the
parent is reported by the parent's own lines)."""


def _may_ignore(msg: bytes) -> bool:
    """False when ``IGNORABLE`` cannot match ``msg``: its first 2000 bytes hold none of the
    words every one of its phrases has (case-insensitive, ASCII, as the pattern). The phrase
    search tries a dozen case-folded branches at every byte; most ERROR lines have none."""
    low = msg[:2000].lower()
    return b"ignore" in low or b"harmless" in low or b"not affect" in low


def _may_fail(msg: bytes) -> bool:
    """False when ``FAILED_CALL`` cannot match ``msg``: it holds none of the words each of its
    forms has (the pattern tries them after every one of its first 400 bytes)."""
    return (
        b"function error: " in msg
        or b"rror code" in msg
        or b"rrorcode" in msg
        or (b"errno[" in msg)
    )


def _may_be_fatal(msg: bytes) -> bool:
    """False when ``FATAL`` cannot match ``msg``. Each of its forms starts the line with a
    literal (``_FATAL_STARTS``; ``what(): `` after blanks too), holds ``Killed``, or ends the
    line, before trailing blanks, with a signal's name or `` (core dumped)`` (``_FATAL_ENDS``):
    its forms that may come after other text are tried at every one of 120 bytes, and ran for
    every candidate line not an exception (issue 18)."""
    return (
        msg.startswith(_FATAL_STARTS)
        or b"Killed" in msg
        or msg.rstrip().endswith(_FATAL_ENDS)
        or (msg[:1].isspace() and msg.lstrip().startswith(b"what(): "))
    )


_FATAL_STARTS = (
    b"terminate called",
    b"what(): ",
    b"Fatal Python error",
    b"Fatal glibc error",
    b"Segmentation fault",
    b"*** ",
    b"panic: ",
    b"thread '",
    b"fatal error: ",
    b"double free or corruption",
    b"free(): invalid",
    b"malloc(): ",
    b"munmap_chunk(): invalid",
    b"corrupted size vs. prev_size",
    b"corrupted double-linked list",
)
"""The literals ``FATAL``'s forms anchored at the line's start begin with."""
_FATAL_ENDS = (
    b"Floating point exception",
    b"Bus error",
    b"Illegal instruction",
    b"Aborted",
    b" (core dumped)",
)
"""What a line ``FATAL`` reads as a shell's signal report ends with (before blanks)."""


def _may_state_error(msg: bytes) -> bool:
    """False when ``STATED_ERROR`` cannot match ``msg``: it holds none of the literals one of
    its forms holds (a form starting ``E`` is a CANN code at the line's start). Its forms
    that may come after other text try a score of verbs at each of 200 bytes: 4 us a line
    that has none, most lines (issue 18)."""
    return (
        b"ailed to " in msg
        or b"FAILED to " in msg
        or b" failed" in msg
        or b"error: " in msg
        or b"undefined reference to `" in msg
        or b"[ERROR] " in msg
        or b"[FATAL] " in msg
        or b"[CRITICAL] " in msg
        or msg[:1] == b"E"
        or b"Reason: " in msg
        or b"] Error " in msg
        or b"has no attribute '" in msg
    )


STATED_ERROR = regex.compile(
    # "Failed to import torch_npu.", containerd's "failed to register layer: ...", CANN's
    # "FAILED to ..."
    rb"(?:[Ff]ailed|FAILED) to [a-z]\w{1,40}\b"
    # a native call reporting its own failure: "Aicore kernel execute failed, device_id=2",
    # "GELib::InnerInitialize failed.", "OpCompileProcessor init failed!"
    rb"|[^\n]{0,200}?\b(?:execute|execution|init|initiali[sz]e|initiali[sz]ation|load|launch"
    rb"|open|register|create|allocate|alloc|malloc|connect|bind|build|compile|parse) failed"
    rb"(?:[,.!:]|\s|$)"
    # a compiler's or linker's diagnostic: "kernel_macros.h:24:10: fatal error: 'cstdint' file
    # not found", "foo.cpp:(.text+0x1c): undefined reference to `aclrtGetVersion'"
    rb"|[\w./+-]{1,200}:\d{1,7}(?::\d{1,7})?: (?:fatal )?error: \S"
    rb"|(?:[^\n]{0,200}?: )?undefined reference to `"
    # a level tag inside the text of an unleveled line (a script's "..[ERROR] the socversion")
    rb"|[^\n]{0,40}?\[(?:ERROR|FATAL|CRITICAL)\] \S"
    # a CANN error code that starts a sentence without its colon ("E19999 The opp version of")
    rb"|E[0-9A-Z]\d{4} [A-Z][a-z]"
    # CANN's error-message texts without their code (hicann/runtime 681ef76
    # src/dfx/error_manager/error_code.json): "%s failed. Reason: %s.", "The argument is
    # invalid. Reason: %s" (printed "invalid.Reason:" too), "%s is not supported. Reason:",
    # "Getting socket times out. Reason:", "Transport init error. Reason:"
    rb"|[^\n]{0,300}?\b(?:failed|invalid|not supported|times out|error)\. ?Reason: \S"
    # GNU make's report of a failed recipe ("gmake[3]: *** [CMakeFiles/x.dir/y.o] Error 1")
    rb"|g?make(?:\[\d{1,4}\])?: \*\*\* \[[^\]\n]{1,300}\] Error \d"
    # an AttributeError's text printed without its name ("module 'torch_npu' has no attribute
    # '_npu_flash_attention'", "'NoneType' object has no attribute 'x'")
    rb"|(?:module|type object|'[\w.]{1,80}' object) '?[\w.]{0,80}'? ?has no attribute '"
)
"""A line with no logging header that states a failure in one of the forms programs print
one: an error whatever its header says (none), when no rule knows it."""
TOOL_ERROR = regex.compile(rb"\s{1,24}(?:ERROR: \S|CMake Error at \S)")
"""A build tool's error as a nested build indents it: pip's ``  ERROR: Failed building wheel
for vllm_ascend`` (pip indents the output of the build it runs), CMake's ``CMake Error at
CMakeLists.txt:14 (project):`` inside pip's or setup.py's output. Indented, so no other form
reads it; never inside a traceback."""
CONTINUED_ERROR = regex.compile(
    rb"(?!(?:raise|return|assert|await|yield|self|super|def|if|elif|else|for|while|with|import"
    rb"|from|File|try|except|finally|lambda|print)\b)"
    rb"(?!\S{0,120}\()(?![\w.\[\]'\"]{1,120} ?[-+*/]?= )"
    rb"(?:[A-Z][a-z]{1,40}[ ,:.;!]|\[[A-Za-z]|[A-Z]\w{1,60}::\w"
    rb"|[^\n]{0,400}?(?:failed|rror|\[FUNC:))"
)
"""The text of an error on an indented ERROR line: a sentence (``The argument is invalid.``,
``Possible Cause: ...``), a bracketed CANN tag, a C++ name, or a line that says ``failed`` or
``error``; not a line of Python source that a logged traceback quotes (``super().__init__(``,
``raise RuntimeError(...)``, ``x = f(y)``)."""


_ERRORISH = regex.compile(rb"ERROR|CRITICAL|FATAL|error|fatal|\[[EF][\d ]|[EF]\d{4,8} \d")
"""Every way a header names an error level (``rules/parse.py``: words, glog's and c10's
``E``/``F`` letters, ``level=error``): a line without any is of no error level."""


def _isolated(data: bytes, start: int, parsed: dict[int, Parsed], file_start: bool) -> bool:
    """Whether the line at ``start`` follows no ERROR or CRITICAL line: an indented ERROR line
    after another continues it (the next line of a logged traceback or CANN message); one
    after none is an error of its own. The first line of a chunk is isolated only when the
    chunk starts its file (a chunk read later may continue what the one before held)."""
    if start == 0:
        return file_start
    prev = data.rfind(b"\n", 0, start - 1) + 1
    if _ERRORISH.search(data, prev, start) is None:
        return True  # nothing a header of an error level is written with: not parsed
    return _parsed(data, prev, parsed)[1].level not in ("ERROR", "CRITICAL")


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
    p = parsed.get(start)
    if p is None:
        p = parsed[start] = parse(line)
    return line, p


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
    holders = _traceback_lines(data)  # no other line is a traceback's header
    if python and holders:
        late = {_exception_after(data, start, parsed) for start in found if start in holders}
        late.discard(-1)
    else:
        late = set()
    extra = forced | late
    for start in sorted(set(found) | extra) if extra else found:
        if start <= covered_to:
            continue
        # _parsed, inline: this runs for every candidate line
        end = data.find(b"\n", start)
        line = data[start : end if end >= 0 else len(data)]
        p = parsed.get(start)
        if p is None:
            p = parsed[start] = parse(line)
        msg = line[p.message :]
        if (msg.startswith((b"Re", b"Ge")) and REQUEST_LOG.match(msg)) or (
            p.header == "vllm" and "dump_input.py:" in p.logger and ECHO_LOGGERS.search(p.logger)
        ):
            continue  # echoes of requests (prompts, outputs, the scheduler dump)
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
        if is_exception or (_may_be_fatal(msg) and FATAL.match(msg)):
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
            or (_may_fail(msg) and FAILED_CALL.match(msg))
            or (b"[FUNC:" in msg and CANN_TRACE.match(msg))
            or (
                traceback_at < 0
                and not CONTINUATION.match(msg)
                and _may_state_error(msg)
                and STATED_ERROR.match(msg)
                and not _harmless(msg)
            )
        ):
            units.append(Unit(start, start, start, False))
            continue
        if p.level in ("ERROR", "CRITICAL") and not CONTINUATION.match(msg):
            if _ignorable(msg):
                continue  # an ERROR line that says itself it is harmless
            if msg.startswith(b"TBE Subprocess[") and EXIT_NOISE.match(msg):
                continue  # a worker reporting its parent's exit
            units.append(Unit(start, start, start, False, _request_logger(p.logger)))
        elif (
            p.level in ("ERROR", "CRITICAL")
            and traceback_at < 0
            and CONTINUED_ERROR.match(msg.lstrip())
            and _isolated(data, start, parsed, file_start)
            and not _harmless(msg)
        ):
            # an indented ERROR line that continues nothing: the one line of a logged message
            # that a log cut, or a quote of it
            units.append(Unit(start, start, start, False, _request_logger(p.logger)))
    return units


MASKING = (
    (r"0x[0-9a-fA-F]+", "HEX"),
    (r"\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?", "IP"),
    (r"(?<![A-Za-z_\d])-?\d+(?:\.\d+)?(?![A-Za-z_\d])", "NUM"),
)
"""What a message's template masks before drain3 clusters it: hex values, addresses, numbers."""


class Templates:
    """drain3 over the messages of unrecognised units; one miner per engine, made (and
    drain3 loaded) for the first unrecognised error."""

    def __init__(self) -> None:
        self._miner: Miner | None = None

    def template(self, message: str) -> tuple[str, str]:
        """(template, stable id) of one message."""
        if self._miner is None:
            self._miner = Miner(0.5, MASKING)
        text = self._miner.template(message[:2000]) or message
        return text, hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


__all__ = ["MAX_TRACEBACK_LINES", "UNIT_KEYS", "Templates", "Unit", "error_units"]
