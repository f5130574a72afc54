"""Building findings: evidence lines and their numbers, code findings, unrecognised units.

Helpers of the engine; pure functions over a chunk's bytes.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

from ascend_doctor.core import regex
from ascend_doctor.core.events import Category, Finding, LogChunk, LogLine, Role, Severity
from ascend_doctor.rules.catalogue import Entry
from ascend_doctor.rules.codes import CodeHit, device_of
from ascend_doctor.rules.drain import Templates
from ascend_doctor.rules.infer import Model, infer, unit_text
from ascend_doctor.rules.lines import Lines, parsed_at
from ascend_doctor.rules.parse import Parsed
from ascend_doctor.rules.unrecognised import Unit, error_units

_DEVICE_CATEGORIES = frozenset(
    {Category.DEVICE_FAULT, Category.DEVICE_UNAVAILABLE, Category.AICORE_ERROR}
)


class Hit:
    """A rule's or a code's match on a line before it is a finding: what :func:`kept` reads
    of it, and how to make the finding. A line of a failure-dense log holds several matches
    and keeps half of them (a generic phrase yields to a specific one, a code to a rule of
    its category): a finding is made only for a match that is kept."""

    __slots__ = ("_args", "_make", "category", "rule")

    def __init__(
        self, category: Category, rule: str, make: Callable[..., Finding], args: tuple[Any, ...]
    ) -> None:
        self.category = category
        """The finding's category."""
        self.rule = rule
        """The finding's rule id."""
        self._make, self._args = make, args

    def finding(self) -> Finding:
        """The finding (made on each call: call once)."""
        return self._make(*self._args)


def code_rule(entry: Entry) -> str:
    """The rule id of a catalogued code's finding: ``code:<kind>:<code>``."""
    return f"code:{entry.kind}:{entry.code}"


def kept(
    line_hits: list[tuple[tuple[object, ...], Hit]],
) -> list[tuple[tuple[object, ...], Hit]]:
    """What a line keeps: every rule match; a code only where no rule of its category
    matched (the rule's summary carries the captures), one per category; a generic match
    only where nothing specific did. A generic root cause yields only to a specific root
    cause: a symptom's wording around it ("Worker failed with error 'ImportError: ...'")
    does not hide the cause it quotes."""
    if len(line_hits) == 1:
        return line_hits  # one match: kept (the common case in a failure-dense log)
    ordered = sorted(line_hits, key=lambda h: h[0])
    specific_root = any(not key[1] and not key[0] for key, _ in ordered)
    specific = any(not key[1] for key, _ in ordered)

    def yields(key: tuple[object, ...]) -> bool:
        return bool(key[1]) and (specific_root if not key[0] else specific)

    categories = {f.category for key, f in ordered if key[3] == 0 and not yields(key)}
    out: list[tuple[tuple[object, ...], Hit]] = []
    for key, finding in ordered:
        if yields(key):
            continue
        if key[3] == 1:
            if finding.category in categories:
                continue
            categories.add(finding.category)
        out.append((key, finding))
    return sorted(out, key=lambda h: h[1].rule)


def end_of(data: bytes, start: int) -> int:
    end = data.find(b"\n", start)
    return len(data) if end < 0 else end


# an exception that names the CANN error block printed right below it
# ("RuntimeError: call aclnnX failed, detail:EZ9999: Inner Error!")
_NAMES_BLOCK = regex.compile(rb"E[0-9A-Z]\d{4}: Inner Error!?\s*$|detail:\s*E[0-9A-Z]\d{4}")


def before_lines(data: bytes, start: int, n: int) -> int:
    pos = start
    for _ in range(n):
        if pos <= 0:
            return 0
        pos = data.rfind(b"\n", 0, pos - 1) + 1
    return pos


def after_lines(data: bytes, start: int, n: int) -> int:
    pos = start
    for _ in range(n):
        pos = data.find(b"\n", pos) + 1
        if pos <= 0:
            return len(data)
    return pos


def context_evidence(
    chunk: LogChunk, start: int, before_n: int, after_n: int, lines: Lines
) -> tuple[LogLine, ...]:
    """The line at ``start`` first, then ``before_n`` lines before and ``after_n`` after."""
    if not (before_n or after_n):  # `rules scan` prints the line alone
        return (lines.cut.get(start) or lines.at(start, lines.number(start)),)
    data = chunk.data
    size = len(data)
    at, cut = lines.at, lines.cut  # most lines were cut already (a neighbour's context)
    number = lines.number(start)
    step = 1 if number else 0
    after: list[LogLine] = []
    pos = data.find(b"\n", start) + 1
    while len(after) < after_n and 0 < pos < size:
        after.append(cut.get(pos) or at(pos, number + (len(after) + 1) * step))
        pos = data.find(b"\n", pos) + 1
    before: list[LogLine] = []
    pos = start
    while len(before) < before_n and pos > 0:
        pos = data.rfind(b"\n", 0, pos - 1) + 1
        before.append(cut.get(pos) or at(pos, number - (len(before) + 1) * step))
    before.reverse()
    return (cut.get(start) or at(start, number), *before, *after)


def unexplained(
    chunk: LogChunk,
    merged: list[tuple[Finding, int, int]],
    templates: Templates,
    clock: Callable[[], float],
    after_n: int,
    lines: Lines,
    candidates: list[int] | None = None,
    forced: frozenset[int] = frozenset(),
    quiet: frozenset[int] = frozenset(),
    parsed: dict[int, Parsed] | None = None,
    model: Callable[[], Model] | None = None,
) -> list[Finding]:
    """An ``unrecognised`` finding for every error unit no finding of ``merged`` explains
    (``quiet`` lines are expected where they are: no unit holding one is reported;
    ``parsed``: lines parsed already, by their start); with ``model`` (made when first
    needed), a server error whose words place it in a family with confidence carries that
    category, marked inferred (rules/infer.py); one request's failure is never inferred."""
    data = chunk.data
    # an engine's death is a consequence: it explains the line it is on, never an unknown
    # error next to it (the worker's exception before "EngineCore encountered a fatal error")
    on_line = {first for _, first, _ in merged}
    covered = sorted(
        (first, end) for f, first, end in merged if f.category is not Category.ENGINE_DEAD
    )
    starts = [first for first, _ in covered]
    parsed = {} if parsed is None else parsed  # shared with unit_finding's key lines
    units = error_units(data, chunk.source, candidates, forced, parsed, chunk.offset == 0)
    out = []
    for i, unit in enumerate(units):
        if unit.key_line in quiet or unit.first in quiet:
            continue
        if unit.key_line in on_line:
            continue
        nxt = units[i + 1] if i + 1 < len(units) else None
        if (
            nxt is not None
            and nxt.first <= after_lines(data, unit.last, 1)
            and _NAMES_BLOCK.search(data, unit.key_line, end_of(data, unit.key_line))
        ):
            continue  # the block below speaks for it: explained there, or reported there
        # a unit is explained by a finding inside it or right after it, up to the next
        # unit (an exception's message and CANN block follow its exception line)
        stop = units[i + 1].first if i + 1 < len(units) else len(data)
        # 30 lines on at most: counted in C when the next unit is near, walked when far
        near = min(stop, unit.last + 8192)
        if near < stop or data.count(b"\n", unit.last, near) >= 30:
            stop = min(stop, after_lines(data, unit.last, 30))
        j = bisect.bisect_left(starts, unit.first)
        if j < len(starts) and starts[j] < max(stop, unit.last + 1):
            continue
        if j > 0 and covered[j - 1][1] >= unit.key_line:
            continue  # inside a block a finding already holds
        if not unit.severe and j > 0 and covered[j - 1][1] >= before_lines(data, unit.first, 3):
            continue  # a wrapper line right after an explained error ("ERR00100 ...")
        finding = unit_finding(chunk, unit, templates, clock, after_n, lines, parsed)
        if model is not None and not unit.request:  # one request's failure names no family
            finding = infer(finding, model(), unit_text(data, unit))
        out.append(finding)
    return out


def unit_finding(
    chunk: LogChunk,
    unit: Unit,
    templates: Templates,
    clock: Callable[[], float],
    after_n: int,
    lines: Lines,
    parsed: dict[int, Parsed],
) -> Finding:
    """One error unit as an ``unrecognised`` finding; its summary is its template.
    ``parsed``: the chunk's lines parsed already, by their start (the key line is one)."""
    data = chunk.data
    end = end_of(data, unit.key_line)
    p = parsed_at(data, unit.key_line, end, parsed)
    text = data[unit.key_line + p.message : end].decode("utf-8", "replace").strip()
    template, template_id = templates.template(text)
    first = lines.number(unit.first) if unit.first != unit.key_line else 0
    number = lines.number(unit.key_line)
    step = 1 if number else 0
    evidence = [lines.at(unit.key_line, number)]
    if unit.first != unit.key_line:
        evidence.append(lines.at(unit.first, first))
    pos = end_of(data, unit.key_line) + 1
    for k in range(1, after_n + 1):
        if pos >= len(data):
            break
        evidence.append(lines.at(pos, number + k * step))
        pos = end_of(data, pos) + 1
    return Finding(
        rule="unrecognised",
        category=Category.UNRECOGNISED,
        severity=(
            Severity.INFO if unit.request else Severity.ERROR if unit.severe else Severity.WARNING
        ),
        role=Role.SYMPTOM,
        subject="server",
        summary=template,
        at=clock(),
        captures={"template_id": template_id, "template": template, "message": text},
        evidence=tuple(evidence),
        path=chunk.path,
        offset=chunk.offset + unit.key_line,
        file_id=chunk.file_id or chunk.path,
        remediation=(),
        explain=(
            "An error no rule or code catalogue explains. The same error repeated is one "
            "template (template_id); its exact text is the evidence. No remediation is "
            "ever planned from it."
        ),
    )


_LABEL = {"acl": "ACL", "cann": "CANN", "hccl": "HCCL", "device_fault": "NPU fault"}
"""How a code's kind is named in a summary (other kinds by their own name)."""


def code_finding(
    hit: CodeHit,
    chunk: LogChunk,
    start: int,
    clock: Callable[[], float],
    evidence: tuple[LogLine, ...],
) -> Finding:
    """A catalogued code as a finding: its category, meaning and remediation."""
    entry = hit.entry
    data = chunk.data
    device = (
        device_of(data[start : end_of(data, start)]) if entry.category in _DEVICE_CATEGORIES else ""
    )
    name = f" {entry.name}" if entry.name and entry.kind != "cann" else ""
    printed = entry.code if entry.kind != "cann" else f"{entry.code} {entry.name}".strip()
    summary = f"{_LABEL.get(entry.kind, entry.kind)} {printed}{name}: {entry.meaning}"
    if entry.level:
        summary += f" (fault level {entry.level})"
    captures = {"code": entry.code, "kind": entry.kind, "printed": hit.printed}
    if device:
        captures["device"] = device
    if entry.level:
        captures["level"] = entry.level
    return Finding(
        rule=code_rule(entry),
        category=entry.category,
        severity=entry.severity,
        role=entry.role,
        subject=f"npu{device}" if device else "server",
        summary=summary,
        at=clock(),
        captures=captures,
        evidence=evidence,
        path=chunk.path,
        offset=chunk.offset + start,
        file_id=chunk.file_id or chunk.path,
        remediation=entry.remediation,
        explain=f"{entry.meaning} Source: {', '.join(entry.sources)}",
        generic=entry.generic,
    )


__all__ = [
    "Hit",
    "Lines",
    "after_lines",
    "before_lines",
    "code_finding",
    "code_rule",
    "context_evidence",
    "end_of",
    "kept",
    "unexplained",
    "unit_finding",
]
