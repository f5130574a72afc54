"""CANN error-message blocks: one finding per block, with the whole block as evidence.

torch_npu prints CANN errors as a block: the code line (``EZ9999: Inner Error!`` then
``EZ9999: [PID: 838] ...``, or the newer ``EE9999[PID: 1210] ... (EE9999):  ...``),
``Possible Cause:`` / ``Solution:`` lines, ``TraceBack (most recent call last):`` and
indented inner lines ending in ``[FUNC:...][FILE:...][LINE:...]``. Rules match single
lines; when several lines of one block match, the block becomes one finding: the most
telling match (root before symptom, then worse severity, then earliest) with every line
of the block as evidence. Only lines around matches are examined.
"""

from __future__ import annotations

import dataclasses
import re

from ascend_doctor.core import regex
from ascend_doctor.core.events import Finding, LogChunk, LogLine
from ascend_doctor.rules.lines import Lines
from ascend_doctor.rules.parse import LINE_PREFIX

MAX_BLOCK_LINES = 60

PREFIX = regex.compile(b"^" + LINE_PREFIX.pattern)
"""What may precede a block's line (``parse.LINE_PREFIX``): the prefixes a posted or collected
log adds (kubelet, docker, compose, vLLM and Ray process tags, ``[rankN]:``) and vLLM's header,
so that a block is one block whatever its lines carry."""
CODE_LINE = regex.compile(rb"^[EWI][0-9A-Z]\d{4}(?::|\[PID)")
BODY_LINE = regex.compile(
    rb"^(?:[EWI][0-9A-Z]\d{4}(?::|\[PID)|Possible Cause:|Solution:|TraceBack \(most recent"
    rb"|\s|.*\[FUNC:[^\]]*\]\[FILE:[^\]]*\]\[LINE:\d+\]\s*$)"
)


_PREFIX_AT = regex.compile(PREFIX.pattern.removeprefix(b"^"))
_CODE_AT = regex.compile(CODE_LINE.pattern.removeprefix(b"^"))
_BODY_AT = regex.compile(BODY_LINE.pattern.removeprefix(b"^"))
"""``PREFIX``, ``CODE_LINE`` and ``BODY_LINE`` without their ``^``, to match in ``data`` from a
line's start to its end (``^`` holds only at the start of the string, not at ``pos``): a line
is read without copying it out twice, once with its prefix and once without (issue 18)."""


def _reads(pattern: re.Pattern[bytes], data: bytes, start: int, end: int) -> bool:
    """``pattern`` (one of ``_CODE_AT``, ``_BODY_AT``) matches the body of ``data[start:end]``
    (what follows its ``PREFIX``) as ``CODE_LINE``/``BODY_LINE`` match that body cut out:
    ``end`` is where the line ends (``$`` holds there); an empty line has no body either
    matches."""
    if end <= start:
        return False
    m = _PREFIX_AT.match(data, start, end)  # all optional: always a match
    return pattern.match(data, m.end() if m else start, end) is not None


def _lines_around(data: bytes, start: int) -> tuple[int, int] | None:
    """(first, end) byte range of the block containing the line at ``start``, if any."""
    end = data.find(b"\n", start)
    end = len(data) if end < 0 else end
    if not _reads(_BODY_AT, data, start, end):
        return None
    # walk back to the code line that opens the block (a last line without a newline is read
    # without its last byte, as the slice to its -1 always cut it)
    first, n = start, 0
    while not _reads(_CODE_AT, data, first, _slice_end(data, data.find(b"\n", first))):
        if first == 0 or n >= MAX_BLOCK_LINES:
            return None
        prev = data.rfind(b"\n", 0, first - 1) + 1
        if not _reads(_BODY_AT, data, prev, first - 1):
            return None
        first, n = prev, n + 1
    # walk forward over the block's body lines
    last_end = end
    pos = end + 1
    while pos < len(data) and n < MAX_BLOCK_LINES:
        nxt = data.find(b"\n", pos)
        nxt = len(data) if nxt < 0 else nxt
        if not _reads(_BODY_AT, data, pos, nxt):
            break
        last_end, pos, n = nxt, nxt + 1, n + 1
    return first, last_end


def _slice_end(data: bytes, end: int) -> int:
    """Where ``data[x:end]`` ends when ``end`` is a ``find`` that may be -1."""
    return len(data) - 1 if end < 0 else end


def block_around(data: bytes, start: int) -> tuple[int, int] | None:
    """(first, end) byte range of the CANN block holding the line at ``start``, if any."""
    return _lines_around(data, start)


def merge_blocks(
    data: bytes,
    chunk: LogChunk,
    found: list[tuple[int, Finding, tuple[object, ...]]],
    lines: Lines,
) -> list[tuple[Finding, int, int]]:
    """Merge findings whose lines lie in one CANN block; others pass unchanged.

    ``found`` is (line start, finding, priority) in line order, one per line; a block keeps
    its best finding (lowest priority: root before symptom, a specific code or phrase before
    a generic code, worse severity first) with every line of the block as evidence. Returns
    (finding, first byte, end byte) of what each finding covers; ``lines`` cuts and numbers the
    lines of a block's evidence.
    """
    out: list[tuple[Finding, int, int]] = []
    block: tuple[int, int] | None = None
    members: list[tuple[int, Finding, tuple[object, ...]]] = []

    def flush() -> None:
        if not members:
            return
        if block is None or (len(members) == 1 and not _multi_line(data, block)):
            for start, finding, _ in members:
                end = data.find(b"\n", start)
                out.append((finding, start, len(data) if end < 0 else end))
        else:
            ranked = sorted(members, key=lambda m: m[2])
            best = ranked[0][1]
            # a rule's phrase beats a code of the same category: its summary has the captures
            best = next(
                (f for _, f, k in ranked if f.category == best.category and k[3] == 0), best
            )
            evidence = _evidence(data, chunk, block, best, lines)
            out.append((dataclasses.replace(best, evidence=evidence), *block))
        members.clear()

    for start, finding, key in found:
        if block is not None and block[0] <= start <= block[1]:
            members.append((start, finding, key))
            continue
        flush()
        block = _lines_around(data, start)
        if block is None:  # most lines: in no block, passed on as flush would alone
            end = data.find(b"\n", start)
            out.append((finding, start, len(data) if end < 0 else end))
            continue
        members.append((start, finding, key))
    flush()
    return out


def _multi_line(data: bytes, block: tuple[int, int]) -> bool:
    return data.find(b"\n", block[0], block[1]) >= 0


def _evidence(
    data: bytes, chunk: LogChunk, block: tuple[int, int], best: Finding, lines: Lines
) -> tuple[LogLine, ...]:
    pos = block[0]
    number = lines.number(pos)
    step = 1 if number else 0
    out: list[LogLine] = []
    while pos <= block[1]:
        end = data.find(b"\n", pos)
        out.append(lines.at(pos, number))
        number += step
        pos = (len(data) if end < 0 else end) + 1
    matched = [ln for ln in out if ln.offset == best.offset]
    return tuple(matched + [ln for ln in out if ln.offset != best.offset])


__all__ = ["MAX_BLOCK_LINES", "block_around", "merge_blocks"]
