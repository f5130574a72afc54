"""The rule engine: bytes and samples in, findings out. Pure: no I/O.

Chunks are whole lines; each rule's pattern runs over the chunk once and only
matched lines are cut out, so per-line Python work happens only on matches.
"""

from __future__ import annotations

import operator
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ascend_doctor.core import regex
from ascend_doctor.core.events import (
    Category,
    Finding,
    LogChunk,
    Role,
    Sample,
)
from ascend_doctor.rules import container
from ascend_doctor.rules.blocks import merge_blocks
from ascend_doctor.rules.catalogue import Catalogues, load_catalogues
from ascend_doctor.rules.codes import CODE_KEYS, CodeHit, CodeIndex
from ascend_doctor.rules.drain import Templates
from ascend_doctor.rules.ecc import EccWatch
from ascend_doctor.rules.echo import is_request_log, may_echo
from ascend_doctor.rules.findings import (
    Hit,
    code_finding,
    code_rule,
    context_evidence,
    end_of,
    kept,
    unexplained,
)
from ascend_doctor.rules.infer import Model, kind_of, model_for, unit_text
from ascend_doctor.rules.lines import Lines, parsed_at
from ascend_doctor.rules.loader import QUIET_WINDOW, Rule, RuleSet, ThresholdRule
from ascend_doctor.rules.matcher import MAX_LINE, make_prefilter
from ascend_doctor.rules.parse import Parsed
from ascend_doctor.rules.unrecognised import UNIT_KEYS, error_units

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


_OPTIONAL = regex.compile(r"\[\[(.*?)\]\]", re.S)
_NAME = regex.compile(r"\{(\w+)\}")


def fill(template: str, values: dict[str, Any]) -> str:
    """Fill a ``{name}`` template. A ``[[...]]`` part is kept only when every name in it
    has a value (optional captures); other unknown names become ``?``."""
    return _Filler(template)({k: _text(v) for k, v in values.items()}, values)


class _Filler:
    """:func:`fill` of one template with text captures, its ``[[...]]`` parts found once: a
    rule makes one for its subject and one for its summary, filled for every match,
    thousands of times in a failure-dense log."""

    __slots__ = ("_joined", "_optional", "_parts", "_plain", "_template")

    def __init__(self, template: str) -> None:
        self._template = template
        self._plain = "{" not in template  # nothing to fill: the template itself
        # literal text (names None) and optional parts (the names each must have)
        parts: list[tuple[str, tuple[str, ...] | None]] = []
        pos = 0
        for m in _OPTIONAL.finditer(template):
            parts.append((template[pos : m.start()], None))
            parts.append((m.group(1), tuple(_NAME.findall(m.group(1)))))
            pos = m.end()
        parts.append((template[pos:], None))
        self._optional = "[[" in template  # as fill: then the result is always formatted
        self._parts = parts
        self._joined: dict[tuple[bool, ...], str] = {}

    def __call__(self, captures: dict[str, str], given: dict[str, Any] | None = None) -> str:
        """The template filled with ``captures``; an optional part is kept when each of its
        names has a value in ``given`` (the values before they were made text; default:
        ``captures``)."""
        template = self._template
        if self._optional:
            values = captures if given is None else given
            present = tuple(
                all(values.get(n) not in (None, "") for n in names)
                for _, names in self._parts
                if names is not None
            )
            joined = self._joined.get(present)
            if joined is None:
                kept = iter(present)
                joined = self._joined[present] = "".join(
                    text if names is None or next(kept) else "" for text, names in self._parts
                )
            template = joined
        elif self._plain:
            return template
        try:
            return template.format_map(_Blank(captures))
        except (ValueError, IndexError):
            return template


def _text(value: Any) -> str:
    """A value as a summary shows it: a whole float without its ``.0`` (1 request, not 1.0)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_START = operator.itemgetter(1)

CODE_SOURCES = ("server", "plog", "device", "slog", "host")
"""Streams whose lines are searched for catalogued codes."""
UNIT_SOURCES = ("server", "plog", "device", "slog", "host")
"""Streams whose unexplained error lines become ``unrecognised`` findings (from the host's
kernel log only its fault reports and drivers' ERROR lines)."""


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
        npu_smi_seen: Mapping[str, Mapping[str, Any]] | None = None,
        infer: bool = True,
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
        self._keys = {
            s: [_rule_key(rule, i) for i, rule in enumerate(rs)] for s, rs in by_source.items()
        }
        fillers = {rule.id: (_Filler(rule.subject), _Filler(rule.summary)) for rule in rules.text}
        self._fillers = {s: [fillers[rule.id] for rule in rs] for s, rs in by_source.items()}
        # codes and error lines are found in the same pass as the rules: two extra patterns,
        # each matched to its line's end, so a line holding several of its words is reported
        # once, not once per word (half of a failure-dense log's reports were such repeats)
        extras = tuple(f"(?:{keys})[^\\n]*$" for keys in (CODE_KEYS, UNIT_KEYS))
        self._prefilters = {
            s: make_prefilter(by_source.get(s, []), matcher, extras)
            for s in sorted(set(by_source) | set(CODE_SOURCES))
        }
        self.matcher = next(iter(self._prefilters.values())).name if self._prefilters else "re"
        if catalogues is None:
            catalogues = load_catalogues(list(rules.catalogue_dirs))
        self._catalogues = catalogues
        self._codes = CodeIndex(catalogues)
        self.templates: Templates | None = Templates() if unrecognised else None
        """Mines the templates of unrecognised errors, learning in scan order (None: off)."""
        self.infer = infer
        """Whether an unrecognised error may carry the category its words suggest
        (rules/infer.py); the model is made for the first one."""
        self._firing: set[tuple[str, str]] = set()
        self._ecc = EccWatch(npu_smi_seen)
        self._since: dict[tuple[str, str], float] = {}
        self.lines_scanned = 0
        self.matches = 0

    def scan(self, chunk: LogChunk, marks: list[int] | None = None) -> list[Finding]:
        """Findings in one chunk, in file order; a CANN error block is one finding.
        ``marks``: the chunk's ``lines.newline_marks`` when its reader counted them.

        Rule matches and catalogued codes are gathered first (one per line: the best),
        blocks are merged, then every error unit nothing explained becomes an
        ``unrecognised`` finding. Request-log lines are never evidence. A Docker json-file
        log is read as the lines its records hold (rules/container.py).
        """
        if chunk.source == "server" and (docker := container.decoded(chunk)) is not None:
            return docker.restore(self._scan(docker.chunk, None))
        return self._scan(chunk, marks)

    def _scan(self, chunk: LogChunk, marks: list[int] | None) -> list[Finding]:
        data = chunk.data
        lines = Lines(chunk, marks)
        self.lines_scanned += lines.total()
        hits: dict[int, list[tuple[tuple[object, ...], Hit]]] = {}
        request_log: dict[int, bool] = {}
        # lines parsed for a rule's level, by start: the unrecognised pass reads them again
        parsed: dict[int, Parsed] = {}

        def echo(start: int, end: int) -> bool:
            if start not in request_log:
                request_log[start] = may_echo(data, start, end) and is_request_log(data[start:end])
            return request_log[start]

        def keep(start: int, key: tuple[object, ...], hit: Hit) -> None:
            hits.setdefault(start, []).append((key, hit))

        prefilter = self._prefilters.get(chunk.source)
        code_lines: list[int] = []
        unit_lines: list[int] = []
        quiet: set[int] = set()
        if prefilter is not None:
            rules = self._by_source.get(chunk.source, [])
            keys = self._keys.get(chunk.source, [])
            fillers = self._fillers.get(chunk.source, [])
            n_rules, size = len(rules), len(data)
            # in file order: line numbers are counted forward from the last one
            for index, start in sorted(prefilter.candidates(data), key=_START):
                if index >= n_rules:
                    (code_lines if index == n_rules else unit_lines).append(start)
                    continue
                rule = rules[index]
                end = data.find(b"\n", start)
                if end < 0:
                    end = size
                m = rule.regex.search(data, start, min(end, start + MAX_LINE))
                if m is None or echo(start, end):
                    continue  # a match across lines, or a prompt quoting an error
                if rule.levels and not _level_fits(rule.levels, data, start, end, parsed):
                    continue  # the phrase quoted in a line of another level (INFO, a warning)
                if rule.quiet_after is not None and rule.quiet_after.search(
                    data, max(0, start - QUIET_WINDOW), start
                ):
                    quiet.add(start)  # expected here: no finding, no unrecognised error
                    continue
                args = (rule, fillers[index], chunk, m, start, lines)
                keep(start, keys[index], Hit(rule.category, rule.id, self._finding, args))
        coded_errors: set[int] = set()
        for line_start in sorted(set(code_lines)) if chunk.source in CODE_SOURCES else ():
            for hit in self._codes.scan(data, line_start, end_of(data, line_start), parsed):
                entry = hit.entry
                start = data.rfind(b"\n", 0, hit.start) + 1
                if echo(start, end_of(data, start)):
                    continue
                if entry.category == Category.UNRECOGNISED:
                    # a code naming no failure family: the line is an error unit
                    coded_errors.add(start)
                    continue
                key = (entry.role != Role.ROOT, entry.generic, -entry.severity, 1, 0)
                made = Hit(
                    entry.category, code_rule(entry), self._code_finding, (hit, chunk, start, lines)
                )
                keep(start, key, made)
        # findings made only for the matches each line keeps
        found = [
            (start, kept_hit.finding(), key)
            for start, line_hits in sorted(hits.items())
            for key, kept_hit in (line_hits if len(line_hits) == 1 else kept(line_hits))
        ]
        merged = merge_blocks(data, chunk, found, lines)
        findings = [f for f, _, _ in merged]
        if self.templates is not None and chunk.source in UNIT_SOURCES:
            extra = unexplained(
                chunk,
                merged,
                self.templates,
                self._clock,
                self.context_after,
                lines,
                sorted(set(unit_lines)),
                frozenset(coded_errors),
                frozenset(quiet),
                parsed,
                self._model if self.infer else None,
            )
            findings = sorted(findings + extra, key=lambda f: f.offset)
        self.matches += len(findings)
        return findings

    def _model(self) -> Model:
        return model_for(self.rules, self._negatives)

    def _negatives(self) -> list[str]:
        """The unrecognised class of the model: what the rules' ``no_match`` examples are
        when this engine's rules report them as unrecognised errors."""
        plain = Engine(
            self.rules,
            context_before=0,
            context_after=0,
            clock=lambda: 0.0,
            matcher="re",
            catalogues=self._catalogues,
            infer=False,
        )
        return [
            text
            for rule in self.rules.text
            for line in rule.examples.get("no_match", ())
            for text in plain.unit_texts(line, kind_of(rule))
        ]

    def unit_texts(self, text: str, kind: str = "server") -> list[str]:
        """What the classifier reads of each error that stays unrecognised in ``text`` read
        as a stream of ``kind`` (its own chunk; this engine's templates learn from it)."""
        chunk = LogChunk("<text>", kind, 0, (text + "\n").encode("utf-8", "replace"))
        units = {u.key_line: u for u in error_units(chunk.data, kind)}
        return [
            unit_text(chunk.data, units[f.offset])
            for f in self.scan(chunk)
            if f.rule == "unrecognised" and f.offset in units
        ]

    def _finding(
        self,
        rule: Rule,
        fills: tuple[_Filler, _Filler],
        chunk: LogChunk,
        m: re.Match[bytes],
        start: int,
        lines: Lines,
    ) -> Finding:
        captures = {
            k: v.decode("utf-8", "replace") for k, v in m.groupdict().items() if v is not None
        }
        return Finding(
            rule=rule.id,
            category=rule.category,
            severity=rule.severity,
            role=rule.role,
            subject=fills[0](captures),
            summary=fills[1](captures),
            at=self._clock(),
            captures=captures,
            evidence=context_evidence(chunk, start, self.context_before, self.context_after, lines),
            path=chunk.path,
            offset=chunk.offset + start,
            file_id=chunk.file_id or chunk.path,
            remediation=rule.remediation,
            explain=rule.explain,
            generic=rule.generic,
        )

    def _code_finding(self, hit: CodeHit, chunk: LogChunk, start: int, lines: Lines) -> Finding:
        evidence = context_evidence(chunk, start, self.context_before, self.context_after, lines)
        return code_finding(hit, chunk, start, self._clock, evidence)

    def evaluate(self, samples: Iterable[Sample]) -> list[Finding]:
        """Threshold findings; a rule fires once when its condition becomes true per subject.
        npu-smi's ECC counters are judged against the sample before (rules/ecc.py)."""
        out = []
        for sample in samples:
            if (ecc := self._ecc.evaluate(sample)) is not None:
                out.append(ecc)
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


def _rule_key(rule: Rule, index: int) -> tuple[object, ...]:
    """How a rule's match ranks among the findings of its line (see ``findings.kept``)."""
    return (rule.role != Role.ROOT, rule.generic, -rule.severity, 0, index)


def _level_fits(
    levels: frozenset[str], data: bytes, start: int, end: int, parsed: dict[int, Parsed]
) -> bool:
    level = parsed_at(data, start, end, parsed).level
    return not level or level in levels


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


__all__ = ["Engine", "fill"]
