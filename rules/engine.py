"""The rule engine: bytes and samples in, findings out. Pure: no I/O.

Chunks are whole lines; each rule's pattern runs over the chunk once and only
matched lines are cut out, so per-line Python work happens only on matches.
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ascend_doctor.core.events import (
    Category,
    Finding,
    LogChunk,
    LogLine,
    Role,
    Sample,
    Severity,
)
from ascend_doctor.rules.blocks import merge_blocks
from ascend_doctor.rules.catalogue import Catalogues, load_catalogues
from ascend_doctor.rules.codes import CodeHit, CodeIndex, device_of
from ascend_doctor.rules.loader import Rule, RuleSet, ThresholdRule
from ascend_doctor.rules.matcher import make_prefilter
from ascend_doctor.rules.parse import is_request_log, parse
from ascend_doctor.rules.unrecognised import Templates, Unit, error_units

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


class _Blank(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "?"


_OPTIONAL = re.compile(r"\[\[(.*?)\]\]", re.S)
_NAME = re.compile(r"\{(\w+)\}")


def fill(template: str, values: dict[str, Any]) -> str:
    """Fill a ``{name}`` template. A ``[[...]]`` part is kept only when every name in it
    has a value (optional captures); other unknown names become ``?``."""

    def optional(m: re.Match[str]) -> str:
        names = _NAME.findall(m.group(1))
        return m.group(1) if all(values.get(n) not in (None, "") for n in names) else ""

    template = _OPTIONAL.sub(optional, template)
    try:
        return template.format_map(_Blank({k: _text(v) for k, v in values.items()}))
    except (ValueError, IndexError):
        return template


def _text(value: Any) -> str:
    """A value as a summary shows it: a whole float without its ``.0`` (1 request, not 1.0)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


MAX_LINE = 32768
"""The confirming regex of a rule looks at most this many bytes of a line."""

CODE_SOURCES = ("server", "plog", "device", "slog", "host")
UNIT_SOURCES = ("server", "plog", "device", "slog")
"""Streams whose unexplained error lines become ``unrecognised`` findings (the host's
kernel log has its own reader)."""
"""Streams whose lines are searched for catalogued codes."""


class Engine:
    """Matches chunks against text rules, code catalogues and samples against threshold rules."""

    def __init__(
        self,
        rules: RuleSet,
        *,
        context_before: int = 2,
        context_after: int = 3,
        clock: Callable[[], float] = time.time,
        matcher: str = "auto",
        catalogues: Catalogues | None = None,
        unrecognised: bool = True,
    ) -> None:
        self.rules = rules
        self.context_before = context_before
        self.context_after = context_after
        self._clock = clock
        by_source: dict[str, list[Rule]] = defaultdict(list)
        for rule in rules.text:
            for source in rule.sources:
                by_source[source].append(rule)
        self._by_source = dict(by_source)
        self._prefilters = {s: make_prefilter(r, matcher) for s, r in by_source.items()}
        self.matcher = next(iter(self._prefilters.values())).name if self._prefilters else "re"
        self._codes = CodeIndex(catalogues if catalogues is not None else load_catalogues())
        self._templates = Templates() if unrecognised else None
        self._firing: set[tuple[str, str]] = set()
        self._since: dict[tuple[str, str], float] = {}
        self.lines_scanned = 0
        self.matches = 0

    def scan(self, chunk: LogChunk) -> list[Finding]:
        """Findings in one chunk, in file order; a CANN error block is one finding.

        Rule matches and catalogued codes are gathered first (one per line: the best),
        blocks are merged, then every error unit nothing explained becomes an
        ``unrecognised`` finding. Request-log lines are never evidence.
        """
        data = chunk.data
        self.lines_scanned += data.count(b"\n")
        hits: dict[int, list[tuple[tuple[object, ...], Finding]]] = {}
        request_log: dict[int, bool] = {}

        def echo(start: int, end: int) -> bool:
            if start not in request_log:
                request_log[start] = is_request_log(data[start:end])
            return request_log[start]

        def keep(start: int, key: tuple[object, ...], finding: Finding) -> None:
            hits.setdefault(start, []).append((key, finding))

        prefilter = self._prefilters.get(chunk.source)
        if prefilter is not None:
            rules = self._by_source[chunk.source]
            for index, start in prefilter.candidates(data):
                rule = rules[index]
                end = _end(data, start)
                m = rule.regex.search(data, start, min(end, start + MAX_LINE))
                if m is None or echo(start, end):
                    continue  # a match across lines, or a prompt quoting an error
                key = (rule.role != Role.ROOT, rule.generic, -rule.severity, 0, index)
                keep(start, key, self._finding(rule, chunk, m.groupdict(), start))
        if chunk.source in CODE_SOURCES:
            for hit in self._codes.scan(data):
                entry = hit.entry
                if entry.category == Category.UNRECOGNISED:
                    continue  # a code with no failure family: the unit below reports it
                start = data.rfind(b"\n", 0, hit.start) + 1
                if echo(start, _end(data, start)):
                    continue
                key = (entry.role != Role.ROOT, entry.generic, -entry.severity, 1, 0)
                keep(start, key, self._code_finding(hit, chunk, start))
        found = [
            (start, finding, key)
            for start, line_hits in sorted(hits.items())
            for key, finding in _kept(line_hits)
        ]
        merged = merge_blocks(data, chunk, found)
        findings = [f for f, _, _ in merged]
        if self._templates is not None and chunk.source in UNIT_SOURCES:
            findings = sorted(findings + self._unrecognised(chunk, merged), key=lambda f: f.offset)
        findings = _numbered(chunk, findings)
        self.matches += len(findings)
        return findings

    def _unrecognised(
        self, chunk: LogChunk, merged: list[tuple[Finding, int, int]]
    ) -> list[Finding]:
        assert self._templates is not None
        data = chunk.data
        covered = sorted((first, end) for _, first, end in merged)
        starts = [first for first, _ in covered]
        units = error_units(data, chunk.source)
        out = []
        for i, unit in enumerate(units):
            # a unit is explained by a finding inside it or right after it, up to the next
            # unit (an exception's message and CANN block follow its exception line)
            stop = units[i + 1].first if i + 1 < len(units) else len(data)
            stop = min(stop, _after_lines(data, unit.last, 30))
            j = bisect.bisect_left(starts, unit.first)
            if j < len(starts) and starts[j] < max(stop, unit.last + 1):
                continue
            if j > 0 and covered[j - 1][1] >= unit.key_line:
                continue  # inside a block a finding already holds
            if (
                not unit.severe
                and j > 0
                and covered[j - 1][1] >= _before_lines(data, unit.first, 3)
            ):
                continue  # a wrapper line right after an explained error ("ERR00100 ...")
            out.append(self._unit_finding(chunk, unit))
        return out

    def _unit_finding(self, chunk: LogChunk, unit: Unit) -> Finding:
        assert self._templates is not None
        data = chunk.data
        line = data[unit.key_line : _end(data, unit.key_line)]
        text = line[parse(line).message :].decode("utf-8", "replace").strip()
        template, template_id = self._templates.template(text)
        evidence = [_line_at(chunk, unit.key_line)]
        if unit.first != unit.key_line:
            evidence.append(_line_at(chunk, unit.first))
        pos = _end(data, unit.key_line) + 1
        for _ in range(self.context_after):
            if pos >= len(data):
                break
            evidence.append(_line_at(chunk, pos))
            pos = _end(data, pos) + 1
        return Finding(
            rule="unrecognised",
            category=Category.UNRECOGNISED,
            severity=Severity.ERROR if unit.severe else Severity.WARNING,
            role=Role.SYMPTOM,
            subject="server",
            summary=template,
            at=self._clock(),
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

    def _code_finding(self, hit: CodeHit, chunk: LogChunk, start: int) -> Finding:
        entry = hit.entry
        data = chunk.data
        line = data[start : _end(data, start)]
        device = device_of(line) if entry.category in _DEVICE_CATEGORIES else ""
        label = {"acl": "ACL", "cann": "CANN", "hccl": "HCCL", "device_fault": "NPU fault"}
        name = f" {entry.name}" if entry.name and entry.kind != "cann" else ""
        printed = entry.code if entry.kind != "cann" else f"{entry.code} {entry.name}".strip()
        summary = f"{label.get(entry.kind, entry.kind)} {printed}{name}: {entry.meaning}"
        if entry.level:
            summary += f" (fault level {entry.level})"
        captures = {"code": entry.code, "kind": entry.kind, "printed": hit.printed}
        if device:
            captures["device"] = device
        if entry.level:
            captures["level"] = entry.level
        base = self._finding_evidence(chunk, start)
        return Finding(
            rule=f"code:{entry.kind}:{entry.code}",
            category=entry.category,
            severity=entry.severity,
            role=entry.role,
            subject=f"npu{device}" if device else "server",
            summary=summary,
            at=self._clock(),
            captures=captures,
            evidence=base,
            path=chunk.path,
            offset=chunk.offset + start,
            file_id=chunk.file_id or chunk.path,
            remediation=entry.remediation,
            explain=f"{entry.meaning} Source: {', '.join(entry.sources)}",
        )

    def _finding_evidence(self, chunk: LogChunk, start: int) -> tuple[LogLine, ...]:
        data = chunk.data
        evidence = [_line_at(chunk, start)]
        pos = _end(data, start) + 1
        for _ in range(self.context_after):
            if pos <= 0 or pos >= len(data):
                break
            evidence.append(_line_at(chunk, pos))
            pos = _end(data, pos) + 1
        before: list[LogLine] = []
        pos = start
        for _ in range(self.context_before):
            if pos <= 0:
                break
            prev = data.rfind(b"\n", 0, pos - 1) + 1
            before.insert(0, _line_at(chunk, prev))
            pos = prev
        return (evidence[0], *before, *evidence[1:])

    def _finding(
        self, rule: Rule, chunk: LogChunk, groups: dict[str, bytes | None], start: int
    ) -> Finding:
        captures = {k: v.decode("utf-8", "replace") for k, v in groups.items() if v is not None}
        return Finding(
            rule=rule.id,
            category=rule.category,
            severity=rule.severity,
            role=rule.role,
            subject=fill(rule.subject, captures),
            summary=fill(rule.summary, captures),
            at=self._clock(),
            captures=captures,
            evidence=self._finding_evidence(chunk, start),
            path=chunk.path,
            offset=chunk.offset + start,
            file_id=chunk.file_id or chunk.path,
            remediation=rule.remediation,
            explain=rule.explain,
        )

    def evaluate(self, samples: Iterable[Sample]) -> list[Finding]:
        """Threshold findings; a rule fires once when its condition becomes true per subject."""
        out = []
        for sample in samples:
            for rule in self.rules.thresholds:
                if sample.collector not in rule.sources:
                    continue
                key = (rule.id, sample.subject)
                if _holds(rule, sample.values):
                    since = self._since.setdefault(key, sample.at)
                    if sample.at - since >= rule.hold and key not in self._firing:
                        self._firing.add(key)
                        out.append(self._sample_finding(rule, sample))
                else:
                    self._since.pop(key, None)
                    self._firing.discard(key)
        return out

    def _sample_finding(self, rule: ThresholdRule, sample: Sample) -> Finding:
        values = {**sample.values, "subject": sample.subject}
        return Finding(
            rule=rule.id,
            category=rule.category,
            severity=rule.severity,
            role=rule.role,
            subject=fill(rule.subject, values),
            summary=fill(rule.summary, values),
            at=sample.at,
            captures={k: str(v) for k, v in values.items() if isinstance(v, str | int | float)},
            remediation=rule.remediation,
            explain=rule.explain,
        )


def _holds(rule: ThresholdRule, values: dict[str, Any]) -> bool:
    for name, op, threshold in rule.conditions:
        if values.get(name) is None:
            return False
        try:
            if not _OPS[op](values[name], threshold):
                return False
        except TypeError:
            return False
    return True


_DEVICE_CATEGORIES = frozenset(
    {Category.DEVICE_FAULT, Category.DEVICE_UNAVAILABLE, Category.AICORE_ERROR}
)


def _kept(
    line_hits: list[tuple[tuple[object, ...], Finding]],
) -> list[tuple[tuple[object, ...], Finding]]:
    """What a line keeps: every rule match; a code only where no rule of its category
    matched (the rule's summary carries the captures), one per category; a generic match
    only where nothing specific did."""
    ordered = sorted(line_hits, key=lambda h: h[0])
    specific = any(not key[1] for key, _ in ordered)
    categories = {f.category for key, f in ordered if key[3] == 0 and not (key[1] and specific)}
    out: list[tuple[tuple[object, ...], Finding]] = []
    for key, finding in ordered:
        if key[1] and specific:
            continue
        if key[3] == 1:
            if finding.category in categories:
                continue
            categories.add(finding.category)
        out.append((key, finding))
    return sorted(out, key=lambda h: h[1].rule)


def _end(data: bytes, start: int) -> int:
    end = data.find(b"\n", start)
    return len(data) if end < 0 else end


def _before_lines(data: bytes, start: int, n: int) -> int:
    pos = start
    for _ in range(n):
        if pos <= 0:
            return 0
        pos = data.rfind(b"\n", 0, pos - 1) + 1
    return pos


def _after_lines(data: bytes, start: int, n: int) -> int:
    pos = start
    for _ in range(n):
        pos = data.find(b"\n", pos) + 1
        if pos <= 0:
            return len(data)
    return pos


def _line_at(chunk: LogChunk, start: int) -> LogLine:
    """The line at ``start``, its number left 0 for ``_numbered``."""
    raw = chunk.data[start : _end(chunk.data, start)]
    return LogLine(
        path=chunk.path,
        offset=chunk.offset + start,
        text=raw.decode("utf-8", "replace").rstrip("\r"),
        line=0,
    )


def _numbered(chunk: LogChunk, findings: list[Finding]) -> list[Finding]:
    """Number every evidence line in one pass over the chunk: the newlines are counted
    between consecutive offsets in sorted order, so the cost stays linear in bytes however
    many lines are evidence."""
    if not chunk.first_line or not findings:
        return findings
    offsets = sorted({e.offset - chunk.offset for f in findings for e in f.evidence})
    numbers: dict[int, int] = {}
    line, pos = chunk.first_line, 0
    for off in offsets:
        line += chunk.data.count(b"\n", pos, off)
        pos = off
        numbers[off] = line
    return [
        dataclasses.replace(
            f,
            evidence=tuple(
                dataclasses.replace(e, line=numbers[e.offset - chunk.offset]) for e in f.evidence
            ),
        )
        for f in findings
    ]


__all__ = ["Engine", "fill"]
