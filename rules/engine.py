"""The rule engine: bytes and samples in, findings out. Pure: no I/O.

Chunks are whole lines; each rule's pattern runs over the chunk once and only
matched lines are cut out, so per-line Python work happens only on matches.
"""

from __future__ import annotations

import operator
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ascend_doctor.core.events import Finding, LogChunk, LogLine, Sample
from ascend_doctor.rules.blocks import merge_blocks
from ascend_doctor.rules.loader import Rule, RuleSet, ThresholdRule
from ascend_doctor.rules.matcher import make_prefilter

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


class Engine:
    """Matches chunks against text rules and samples against threshold rules."""

    def __init__(
        self,
        rules: RuleSet,
        *,
        context_before: int = 2,
        context_after: int = 3,
        clock: Callable[[], float] = time.time,
        matcher: str = "auto",
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
        self._firing: set[tuple[str, str]] = set()
        self._since: dict[tuple[str, str], float] = {}
        self.lines_scanned = 0
        self.matches = 0

    def scan(self, chunk: LogChunk) -> list[Finding]:
        """Findings in one chunk, in file order; a CANN error block is one finding."""
        data = chunk.data
        self.lines_scanned += data.count(b"\n")
        prefilter = self._prefilters.get(chunk.source)
        if prefilter is None:
            return []
        rules = self._by_source[chunk.source]
        found: list[tuple[int, int, Finding]] = []
        for index, start in prefilter.candidates(data):
            rule = rules[index]
            end = data.find(b"\n", start)
            m = rule.regex.search(data, start, end if end >= 0 else len(data))
            if m is None:
                continue  # the prefilter's match spanned lines; the rule did not match this one
            found.append((start, index, self._finding(rule, chunk, m.groupdict(), start)))
        found.sort(key=lambda item: (item[0], item[1]))
        findings = merge_blocks(data, chunk, [(start, f) for start, _, f in found])
        self.matches += len(findings)
        return findings

    def _finding(
        self, rule: Rule, chunk: LogChunk, groups: dict[str, bytes | None], start: int
    ) -> Finding:
        data = chunk.data
        captures = {k: v.decode("utf-8", "replace") for k, v in groups.items() if v is not None}
        evidence = [_line_at(chunk, start)]
        # context after, then before, bounded by the chunk
        pos = data.find(b"\n", start) + 1
        for _ in range(self.context_after):
            if pos <= 0 or pos >= len(data):
                break
            evidence.append(_line_at(chunk, pos))
            pos = data.find(b"\n", pos) + 1
        before: list[LogLine] = []
        pos = start
        for _ in range(self.context_before):
            if pos <= 0:
                break
            prev = data.rfind(b"\n", 0, pos - 1) + 1
            before.insert(0, _line_at(chunk, prev))
            pos = prev
        return Finding(
            rule=rule.id,
            category=rule.category,
            severity=rule.severity,
            role=rule.role,
            subject=fill(rule.subject, captures),
            summary=fill(rule.summary, captures),
            at=self._clock(),
            captures=captures,
            evidence=(evidence[0], *before, *evidence[1:]),
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


def _line_at(chunk: LogChunk, start: int) -> LogLine:
    end = chunk.data.find(b"\n", start)
    raw = chunk.data[start : end if end >= 0 else len(chunk.data)]
    line = 0
    if chunk.first_line:
        line = chunk.first_line + chunk.data.count(b"\n", 0, start)
    return LogLine(
        path=chunk.path,
        offset=chunk.offset + start,
        text=raw.decode("utf-8", "replace").rstrip("\r"),
        line=line,
    )


__all__ = ["Engine", "fill"]
