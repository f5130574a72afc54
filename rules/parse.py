"""Line parsers: the prefixes and header each source puts before a message, read as fields.

A line may carry, outermost first: a kubelet/CRI prefix (``2026-01-02T03:04:05.6Z stdout F``),
a timestamp from ``docker logs -t``, a ``kubectl logs --prefix`` tag, a docker-compose
service column (``name  | ``), a wrapper tag (``[RAW SERVER]``), vLLM/Ray process tags
(``(EngineCore_DP0 pid=276)``, ``(VllmWorker rank=0 pid=1)``, ``(pid=1, ip=10.0.0.5)``), a
torch rank (``[rank0]:``), and then one header: vLLM's logger (``ERROR 09-08 02:55:31
[core.py:702]``, older ``ERROR 03-05 07:15:39 engine.py:387]``), c10's (``[E324 13:00:25.4
compiler_depend.ts:574]``), a CANN plog/slog line (``[ERROR] RUNTIME(4242,python3):2026-...
[stream.cc:1044]``), torch_npu's error line (``[ERROR] 2025-06-03-14:54:23 (PID:8648, ...)``),
Python logging (``2025-03-26 11:48:53 - INFO - name -``), uvicorn (``ERROR:    ...``).
Rules still match the raw line; the parsed fields tell the engine which lines are error
lines, which are request-log echoes (never evidence) and where a message starts.
"""

from __future__ import annotations

import re
import re._parser as sre  # type: ignore[import-not-found]  # no stub; sre_parse warns
from dataclasses import dataclass
from typing import Any

from ascend_doctor.core import regex

_OUTER = regex.compile(
    # syslog/journalctl of the kernel or a service: "Aug  1 08:38:31 host kernel: ",
    # "2026-08-01T08:38:31.123456+08:00 host kernel: ", "Dec  7 12:00:00 host vllm[1234]: "
    # (a server run as a systemd unit, read back with journalctl); dmesg's "[ 1197.584409] "
    rb"(?:(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d"
    rb"|\d{4}-\d\d-\d\dT[\d:.]{8,15}(?:Z|[+-]\d\d:?\d\d)?) [\w.-]{1,64} "
    rb"(?:kernel|[\w./@-]{1,64}\[\d{1,10}\]): )?"
    rb"(?:\[\s{0,8}\d{1,10}\.\d{1,9}\] )?"
    rb"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) (?:stdout|stderr) [FP] )?"
    rb"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z )?"
    rb"(?:\[pod/[^\]\s]{1,200}\] )?"
    rb"(?:[\w.-]{1,100} {1,20}\| )?"
    rb"(?:\[[A-Z][A-Z ]{1,30}\] (?=\())?"
    rb"(?:\x1b\[[0-9;]{0,10}m)?"
    rb"(?:\((?:[\w-]{1,60}(?: [\w=-]{1,30})? )?pid=\d+(?:, ip=[\d.:a-fA-F]{1,45})?\)"
    rb"(?:\x1b\[[0-9;]{0,10}m)? ?){0,4}"
    rb"(?:\[rank\d+\]: ?){0,2}"
)
_HEADERS: tuple[tuple[str, re.Pattern[bytes]], ...] = (
    (
        "vllm",
        regex.compile(
            rb"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
            rb"\[?(?P<logger>[\w./-]{1,120}:\d+)\] ?"
        ),
    ),
    (
        "c10",
        regex.compile(
            rb"\[(?P<level>[EWI])(?:\d{3,4} \d\d:\d\d:\d\d\.\d+ (?:\d+ )?| )"
            rb"(?P<logger>[\w./-]{1,80}:\d+)\] ?"
        ),
    ),
    (
        "plog",
        regex.compile(
            rb"\[(?P<level>ERROR|WARNING|INFO|DEBUG|EVENT)\] ?(?P<module>[A-Z][A-Z0-9_]{1,20})"
            rb"\((?P<pid>\d+),[^)]{0,80}\):\d{4}-\d\d-\d\d-\d\d:\d\d:\d\d[.\d]* ?"
            rb"(?:\[(?P<logger>[^\]]{1,120})\])? ?"
        ),
    ),
    (
        "torch_npu",
        regex.compile(
            rb"\[(?P<level>ERROR|WARNING)\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d "
            rb"\(PID:\d+, Device:-?\d+, RankID:-?\d+\) "
        ),
    ),
    (
        "pylog",
        regex.compile(
            rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)? - "
            rb"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
            rb"(?P<logger>[\w.]{1,100}) - "
        ),
    ),
    (
        # the other common Python logging format, the logger's name before the level
        # ("%(asctime)s - %(name)s - %(levelname)s - %(message)s": lmdeploy, MindIE's Python
        # side, many examples): "2025-06-01 10:00:00,123 - lmdeploy - ERROR - msg"
        "pylog_name",
        regex.compile(
            rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[,.]\d+)? - "
            rb"(?P<logger>[\w.-]{1,100}) - "
            rb"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
        ),
    ),
    (
        # Ray's C++ core (src/ray/util/logging.cc, spdlog "[%Y-%m-%d %H:%M:%S,%e %L %P %t] %v":
        # %L the level's letter, then the pid and the thread), the component it may name and
        # RAY_LOG's file:line: "[2026-03-01 22:48:01,851 W 6578 6578] rpc_client.h:153: msg",
        # "[2023-04-12 11:23:25,823 E 946 946] (raylet) gcs_rpc_client.h:533: msg"
        "ray",
        regex.compile(
            rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[TDIWEC]) \d{1,10} \d{1,10}\] "
            rb"(?:\([\w-]{1,40}\) )?(?:(?P<logger>[\w./-]{1,80}:\d+): )?"
        ),
    ),
    (
        # a timestamp then the level: Ray's "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s
        # -- " (ray/_private/ray_constants.py LOGGER_FORMAT), "%(asctime)s %(levelname)s ..."
        # and "%(asctime)s - %(levelname)s - ..." without a name; the time may be bracketed,
        # ISO with a T and a zone, and the level bracketed: "[2025-06-01 10:00:00] [ERROR] "
        "timed",
        regex.compile(
            rb"\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?"
            rb"(?: - | \| |\s{1,4})\[?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\]?"
            rb"(?: - | \| |:? {1,8}|\t|$)(?:(?P<logger>[\w./-]{1,100}:\d+) -- )?"
        ),
    ),
    (
        # glog (C++ libraries such as Mooncake's transfer engine): "E1210 03:24:54.778028
        # 2548307 file.cpp:820] ", newer glog with the year "E20260608 14:45:44.404089 ..."
        "glog",
        regex.compile(
            rb"(?P<level>[IWEF])(?:\d{4})?\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ "
            rb"(?P<logger>[\w.-]{1,80}:\d+)\] "
        ),
    ),
    ("uvicorn", regex.compile(rb"(?P<level>INFO|WARNING|ERROR|CRITICAL):\s+")),
    # Python logging's default format (logging.basicConfig): "ERROR:torch.distributed:msg"
    (
        "pydefault",
        regex.compile(rb"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.]{1,100}):"),
    ),
    # the level word alone after a time the outer prefix took: Rust's tracing-subscriber
    # ("2025-06-01T10:00:00.123456Z ERROR target: msg"),
    # vLLM-Ascend's camem ("2025-06-07T08:10:41.790Z ERROR camem: Failed to import ...")
    (
        "bare",
        regex.compile(
            rb"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?: {1,8}|\t)"
            rb"(?:(?P<logger>[\w.-]{1,80}(?:::[\w.-]{1,80}){0,8}): (?=\S))?"
        ),
    ),
    # loguru (LLaMA-Factory, lmdeploy and others): "2025-06-01 10:00:00.123 | ERROR    | m:f:12 - "
    (
        "loguru",
        regex.compile(
            rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \| (?P<level>[A-Z]{4,8}) *\| "
            rb"(?P<logger>[\w.:<>-]{1,120}) - "
        ),
    ),
    # a bracketed level after up to six bracketed fields (a time, a pid, a thread, a
    # component, as MindIE writes them): "[2025-06-01 10:00:00] [1234] [ERROR] msg",
    # "[ERROR] msg"; spdlog and ATB write the level in lower case ("[2025-01-01 10:00:00.1]
    # [error] [1234] [op.cpp:27] msg"); Go/logfmt "level=error"
    (
        "bracket",
        regex.compile(
            rb"(?:\[[^\]\n]{1,60}\] ?){0,6}"
            rb"\[(?P<level>ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL|FATAL"
            rb"|error|warning|warn|info|debug|critical|fatal|trace)\] ?"
        ),
    ),
    (
        "logfmt",
        regex.compile(
            rb"[^\n]{0,80}?\blevel=\"?(?P<level>error|fatal|warning|warn|info|debug)\b\"? ?"
        ),
    ),
)
_LOGFMT = dict(_HEADERS)["logfmt"]
_LEVELS = {
    b"E": "ERROR",
    b"W": "WARNING",
    b"I": "INFO",
    b"F": "CRITICAL",
    b"C": "CRITICAL",
    b"D": "DEBUG",
    b"T": "DEBUG",
    b"EVENT": "INFO",
    b"WARN": "WARNING",
    b"FATAL": "CRITICAL",
    b"SUCCESS": "INFO",
    b"TRACE": "DEBUG",
}

REQUEST_LOG = regex.compile(
    rb"(?:Received request \S{1,200}: (?:prompt|params)|Received raw HTTP request \S{1,200}: "
    rb"|Generated response \S{1,200}(?: \(streaming (?:delta|complete)\))?: output"
    rb"|Request \S{1,200} details: prompt)"
)
"""vLLM's request logger (``vllm/entrypoints/logger.py``), every wording it has had: v0.4-0.11
``Received request ID: prompt: %r, params: ...``; v0.12+ ``Received request ID: params: ...``
with the prompt at DEBUG as ``Request ID details: prompt: %r``; ``Generated response ID:
output: %r`` and, streaming, ``Generated response ID (streaming delta|complete): output:``;
newest ``Received raw HTTP request ID: {json}``. Prompts, parameters and outputs echoed back:
never evidence of a failure."""

TRACEBACK = regex.compile(rb"\s*Traceback \(most recent call last\):")
_DOTTED = rb"(?:[A-Za-z_]\w{0,60}\.){0,8}"
"""The packages and modules before an exception's class: ``vllm.v1.engine.exceptions.``."""
_EXCEPTION_NAME = (
    rb"(?:[A-Z]\w{0,60})?(?:Error|Exception|Exit|Interrupt|Fault|Failed)"
    rb"(?:\(\w{1,60}(?:Error|Exception)\))?(?:: |:$|$|\(')"
)
_MODULE_CLASS = (
    rb"(?:(?<=\.)exc|(?<=\.)errors|(?<=\.)exceptions|pkg_resources)\.[A-Z]\w{0,60}"
    rb"(?:: \S|:?$)"
)
EXCEPTION = regex.compile(_DOTTED + _EXCEPTION_NAME)
"""A Python exception line: ``RuntimeError: ...``, ``vllm....EngineDeadError: ...``, a repr."""
MODULE_EXCEPTION = regex.compile(_DOTTED + _MODULE_CLASS)
"""A class of a package's exception module, whatever its name says, printed alone (no
traceback before it): ``torch._dynamo.exc.Unsupported: ...`` (torch/_dynamo/exc.py, also
torch._inductor.exc), ``triton.runtime.errors.OutOfResources: ...`` (triton/runtime/
errors.py), a package's ``exceptions`` module (``requests.exceptions.ReadTimeout: ...`` and
``ConnectTimeout`` from requests/exceptions.py, ``websockets.exceptions.ConnectionClosed``),
setuptools' ``pkg_resources.ContextualVersionConflict: ...`` and ``DistributionNotFound``
(pip's vendored copy too). Proposed to the unrecognised pass by the literals ``.exc.``,
``.errors.``, ``.exceptions.`` and ``pkg_resources.`` (``MODULE_EXCEPTION_WORDS``), one of
which every line it matches holds; tried there with ``EXCEPTION`` (``EXCEPTION_LINE``)."""
MODULE_EXCEPTION_WORDS = (b".exc.", b".errors.", b".exceptions.", b"pkg_resources.")
EXCEPTION_LINE = regex.compile(_DOTTED + b"(?:" + _EXCEPTION_NAME + b"|" + _MODULE_CLASS + b")")
"""``EXCEPTION`` or ``MODULE_EXCEPTION`` in one match: both start with the same packages
(``_DOTTED``), so the names after them are
alternatives, and the matcher backtracks through every split of the packages for both: a
line one of them matches is matched. One pattern costs a candidate line a third of what the
two and a test for the words did (issue 18)."""
FATAL = regex.compile(
    rb"(?:terminate called|\s*what\(\): |Fatal Python error|Segmentation fault"
    rb"|\*\*\* SIG\w+ received|panic: |thread '[^'\n]{0,80}' panicked at|fatal error: "
    rb"|(?:[^\n]{0,120}\s)?(?:Floating point exception|Bus error|Illegal instruction|Aborted)"
    rb"(?: \(core dumped\))?\s*$|(?:[^\n]{0,120}\s)?\d+ Killed\s|Killed\s*$"
    rb"|\*\*\* Error in `|\*\*\* stack smashing detected|Fatal glibc error"
    rb"|(?:double free or corruption|free\(\): invalid|malloc\(\): |munmap_chunk\(\): invalid"
    rb"|corrupted size vs\. prev_size|corrupted double-linked list))"
)
"""A fatal line: the C++ runtime's terminate, CPython's fault handler, glog/absl signal
handlers, a shell reporting a signal (``Aborted (core dumped)``, ``Floating point exception``,
``line 3: 4242 Killed  python ...``, a lone ``Killed``), glibc's heap checks (``double free or
corruption (out)``, ``free(): invalid pointer``, ``*** Error in `python3': ...``), Go and Rust
panics."""
ERROR_WORD = regex.compile(
    rb"(?:[\w./ -]{1,60}: )?(?:Error|ERROR|error|FATAL|Fatal|fatal|CRITICAL)(?: error)?: \S"
    rb"|\[Error\]: \S|(?:Unhandled |Uncaught |Caught |Unexpected )?(?:Error|Exception|ERROR) "
    rb"(?:in |executing |occurred|occured|while |during |when |raised|caught)"
)
"""A message that calls itself an error without a logging header: a CLI's ``Error: ...``,
argparse's ``prog: error: ...``, torch_npu's ``[Error]: <text>`` after a failed ACL call, and
the sentences that announce one (``Error executing method 'x'``, ``Exception in thread``,
``Unhandled exception while ...``)."""
FAILED_CALL = regex.compile(
    rb"[^\n]{0,400}?(?:(?:NPU|HCCL|OPS|DIST|ACL|ATB) function error: "
    rb"|[Ee]rror ?code(?: is| ?[:=]) ?-?[1-9]|\berrno\[-?[1-9])"
)
"""A native call that failed with a non-zero code (torch_npu's ``NPU function error: <call>,
error code is N``, ``call aclnnX failed, error code is N``): an error whatever the header
says, when no rule or catalogue knows the code."""
JSON_ERROR = regex.compile(
    rb'\{\s?"(?:object|error)"\s?:[^\n]{0,4000}?"code"\s?:\s?"?(?P<code>[45]\d\d)\b'
)
"""An OpenAI-style error body as vLLM returns it and clients print it:
``{"object":"error","message":"...","type":"InternalServerError","param":null,"code":500}``
(and ``{"error": {...}}``). A 5xx is the server failing; a 4xx is one request refused."""
CANN_TRACE = regex.compile(
    rb"[^\n]{0,4000}?\[FUNC:\w{1,120}\]\[FILE:[\w.-]{1,120}\]\[LINE:\d{1,7}\]"
)
"""CANN's error manager ends every message it reports with where it was raised,
``... [FUNC:InitializeTeFusion][FILE:tbe_op_store_adapter.cc][LINE:1921]``: the inner lines of
an error block (a "TraceBack" of CANN calls), an error even when its code line is not there."""
HOST_FAULT = regex.compile(
    rb"[^\n]{0,200}?(?:segfault at |general protection fault|BUG: |Kernel panic|blocked for more "
    rb"than \d+ seconds|soft lockup|hard LOCKUP|[Hh]ardware [Ee]rror|Machine check"
    rb"|PCIe Bus Error: severity=Uncorrected|EXT4-fs error|I/O error|AER: Uncorrected|\[ERROR\])"
)
"""A kernel line that reports a failure: a fault in a process, a hung task, a lockup, a
hardware or uncorrected PCIe error (the NPU sits on PCIe), a file-system error, or a driver's
own ``[ERROR]`` line (the Ascend driver writes ``[ascend] [ERROR] [module] ...``). A PCIe
error the link corrected (drivers/pci/pcie/aer.c "PCIe Bus Error: severity=Corrected, ...",
after "AER: Corrected error received") is a counter going up, not a failure."""
CANN_CODE = regex.compile(
    rb"(?:E[0-9A-Z]\d{4}(?::|\[PID)|\[PID: \d+\] [\d:.-]+ \w+\(E[0-9A-Z]\d{4}\):)"
)
CONTINUATION = regex.compile(rb"(?:\s|$|frame #\d+:)")
"""A line that continues what is above it: indented (traceback source, CANN block body), empty."""


@dataclass(frozen=True, slots=True)
class Parsed:
    """One line, read by the format of its source."""

    header: str
    """Which header the line has: vllm, c10, plog, torch_npu, pylog, uvicorn or empty."""
    level: str
    """ERROR, WARNING, INFO, DEBUG, CRITICAL, or empty when the line has no header."""
    message: int
    """Offset in the line where the message starts (after every prefix and the header)."""
    logger: str = ""
    """``file.py:line`` of vLLM/c10/plog headers, or the Python logger name."""
    module: str = ""
    """The CANN module of a plog line (RUNTIME, HCCL, DRV, GE...)."""


_DIGITS = frozenset(b"0123456789")


def _sequence(items: Any) -> tuple[set[int] | None, bool]:
    """(the bytes a parsed sequence can start with, whether it can match empty); None when
    any byte might."""
    out: set[int] = set()
    for op, av in items:
        if op in (sre.ASSERT, sre.ASSERT_NOT, sre.AT):
            continue  # zero width
        first, empty = _item(op, av)
        if first is None:
            return None, False
        out |= first
        if not empty:
            return out, False
    return out, True


def _item(op: Any, av: Any) -> tuple[set[int] | None, bool]:
    if op is sre.LITERAL:
        return {av}, False
    if op is sre.IN:
        out: set[int] = set()
        for kind, value in av:
            if kind is sre.LITERAL:
                out.add(value)
            elif kind is sre.RANGE:
                out.update(range(value[0], value[1] + 1))
            elif kind is sre.CATEGORY and value is sre.CATEGORY_DIGIT:
                out |= _DIGITS  # a bytes pattern's \d is ASCII
            else:
                return None, False  # a negation or another class: any byte, to be safe
        return out, False
    if op is sre.SUBPATTERN:
        if av[1] & re.IGNORECASE:
            return None, False  # (?i:...): its bytes in either case, to be safe any byte
        return _sequence(av[3])
    if op is sre.BRANCH:
        alts = [_sequence(alt) for alt in av[1]]
        if any(first is None for first, _ in alts):
            return None, False
        return set().union(*(first for first, _ in alts if first)), any(e for _, e in alts)
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
        first, empty = _sequence(av[2])
        return first, empty or av[0] == 0
    return None, False


def _by_first_byte() -> list[tuple[tuple[str, re.Pattern[bytes]], ...]]:
    """For each byte a message may start with, the headers that can start with it, in
    their order: a line is tried against two or three header patterns, not eleven."""
    parsed = [_sequence(sre.parse(h.pattern, h.flags)) for _, h in _HEADERS]
    firsts = [
        None if empty or h.flags & re.IGNORECASE else first
        for (first, empty), (_, h) in zip(parsed, _HEADERS, strict=True)
    ]
    return [
        tuple(h for h, f in zip(_HEADERS, firsts, strict=True) if f is None or b in f)
        for b in range(256)
    ]


_HEADERS_BY_BYTE = _by_first_byte()


_SGR = regex.compile(rb"\x1b\[[0-9;]{0,32}m")
"""An ANSI colour sequence (SGR). vLLM colours its header's level, time and file:line when its
stream is a terminal (``vllm/logging_utils/formatter.py`` ColoredFormatter, ``VLLM_LOGGING_COLOR``);
a log captured from a terminal (``docker run -t``, a pod with a tty) keeps the sequences."""


def parse(line: bytes) -> Parsed:
    """The fields of one line (without its newline). A header written in colour is read as
    the same header without: its level still decides what the line is."""
    if b"\x1b[" in line:
        return _parse_coloured(line)
    return _parse(line)


def _parse_coloured(line: bytes) -> Parsed:
    """``_parse`` of the line without its colour sequences; the message's offset is mapped
    back into the line (past the sequences that come before it)."""
    spans = [(m.start(), m.end()) for m in _SGR.finditer(line)]
    if not spans:
        return _parse(line)
    p = _parse(_SGR.sub(b"", line))
    removed = 0
    for start, end in spans:
        if start - removed > p.message:
            break
        removed += end - start
    return Parsed(p.header, p.level, p.message + removed, p.logger, p.module)


LINE_PREFIX = regex.compile(
    _OUTER.pattern + rb"(?:" + dict(_HEADERS)["vllm"].pattern + rb")?(?:\[rank\d+\]: ?)?"
)
"""What may come before the body of a line of a CANN error block (rules/blocks.py): every
outer prefix ``parse`` peels (a kubelet or docker time, a compose column, vLLM and Ray
process tags of any shape, ``[rankN]:``), vLLM's header in either of its forms (``ERROR
09-03 19:05:48 [core.py:596]`` and the older ``ERROR 05-29 20:52:26 worker_base.py:581]``)
and a rank tag after it. Every part is optional: it always matches, at worst empty."""


_OUTER_OPENERS = frozenset(b"0123456789[(\x1b")
"""Bytes that open an ``_OUTER`` prefix other than syslog's month or a compose column."""


def _outer_end(line: bytes, pos: int) -> int:
    """Where the prefixes ``_OUTER`` reads from ``pos`` end (``pos`` when none is there). A
    prefix opens with a digit, ``[``, ``(`` or ESC; or it is syslog's month (a capital, two
    letters, a space); or it is a compose column, whose `` | `` ends by ``pos + 122`` (a name
    of 100 bytes at most, 20 spaces at most). A line with none (most messages, and most lines
    after a header) is not matched: the pattern's optional parts cost a third of a
    microsecond to fail (issue 18)."""
    if pos >= len(line):
        return pos
    c = line[pos]
    if (
        c in _OUTER_OPENERS
        or (65 <= c <= 90 and line[pos + 3 : pos + 4] == b" ")
        or line.find(b" | ", pos, pos + 122) >= 0
    ):
        m = _OUTER.match(line, pos)  # every part optional: it always matches
        return m.end() if m else pos
    return pos


_LEVEL_OF: dict[bytes, str] = {}
"""The level each level field seen reads as (``_LEVELS``, else the field upper-cased)."""

_NO_HEADER: dict[int, Parsed] = {}
"""The fields of a line with no header, by where its message starts: a Parsed is immutable,
so one serves every such line (at most one per length of ``_OUTER``'s prefixes)."""


def _no_header(pos: int) -> Parsed:
    p = _NO_HEADER.get(pos)
    if p is None:
        p = _NO_HEADER[pos] = Parsed("", "", pos)
    return p


def _parse(line: bytes) -> Parsed:
    pos = _outer_end(line, 0)
    if pos >= len(line):
        return _no_header(pos)  # every header holds at least one byte
    for name, header in _HEADERS_BY_BYTE[line[pos]]:
        if header is _LOGFMT and b"level=" not in line:
            continue  # its one literal: a line without it is not scanned for it
        h = header.match(line, pos)
        if h is None:
            continue
        groups = h.groupdict()
        raw = groups.get("level") or b""
        level = _LEVEL_OF.get(raw)
        if level is None:
            level = _LEVELS.get(raw.upper()) or raw.decode().upper()
            if len(_LEVEL_OF) < 64:  # a dozen words and letters; loguru's may be any
                _LEVEL_OF[raw] = level
        # vLLM repeats the rank tag after its own header
        end = _outer_end(line, h.end())
        logger = (groups.get("logger") or b"").decode("utf-8", "replace")
        module = (groups.get("module") or b"").decode() if name == "plog" else ""
        return Parsed(name, level, end, logger, module)
    return _no_header(pos)


def message(line: bytes) -> bytes:
    """The message of a line: what is left after every prefix and the header."""
    return line[parse(line).message :]


__all__ = [
    "CANN_CODE",
    "CONTINUATION",
    "ERROR_WORD",
    "EXCEPTION",
    "EXCEPTION_LINE",
    "FAILED_CALL",
    "FATAL",
    "HOST_FAULT",
    "JSON_ERROR",
    "LINE_PREFIX",
    "MODULE_EXCEPTION",
    "MODULE_EXCEPTION_WORDS",
    "REQUEST_LOG",
    "TRACEBACK",
    "Parsed",
    "message",
    "parse",
]
