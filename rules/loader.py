"""Loading rule packs: YAML data, validated at start-up with file, line and rule id."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from ascend_doctor.core import cache, regex
from ascend_doctor.core.errors import ConfigError, RuleError
from ascend_doctor.core.events import Category, PlannedAction, Role, Severity
from ascend_doctor.rules.safety import pattern_problems
from ascend_doctor.rules.yamlload import YamlError, load_yaml

SOURCES = ("server", "plog", "device", "slog", "host")
"""Log streams a text rule may read."""
SAMPLE_SOURCES = ("npu_smi", "vllm", "process", "canary")
"""Collectors a threshold rule may read."""
OPS = ("==", "!=", ">", ">=", "<", "<=")

_TEXT_KEYS = (
    "id category severity role source pattern subject summary explain remediation examples docs"
    " generic quiet_after levels"
).split()
_THRESHOLD_KEYS = (
    "id category severity role source when subject summary explain remediation examples docs"
).split()


@dataclass(frozen=True)
class Rule:
    """A text rule: a regular expression over log lines of some sources."""

    id: str
    """Unique id, stable: alerts and findings name it."""
    category: Category
    """The failure category."""
    severity: Severity
    """How bad a match is."""
    role: Role
    """Root cause or symptom."""
    sources: tuple[str, ...]
    """Streams it reads."""
    pattern: str
    """Python regular expression with named captures, matched within one line."""
    subject: str
    """Template of the failing thing: ``server`` or ``npu{device}``."""
    summary: str
    """Template of the one-line summary, filled with the captures."""
    explain: str
    """What it means and what to check."""
    remediation: tuple[tuple[PlannedAction, ...], ...]
    """Ordered steps; each step is actions applied together."""
    examples: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """``match`` lines and ``no_match`` near misses."""
    file: str = ""
    """Where the rule was loaded from, ``file:line``."""
    generic: bool = False
    """A catch-all phrase (a failed call, a wrapper line): yields to a specific code or phrase
    on the same line or in the same block."""
    quiet_after: re.Pattern[bytes] | None = None
    """A line that makes a match expected: a match within ``QUIET_WINDOW`` bytes after a line
    matching this is no finding and no unrecognised error (an engine 'died' right after its
    own clean shutdown)."""
    levels: frozenset[str] = frozenset()
    """Levels a line with a logging header must have for the rule to match (``ERROR``,
    ``CRITICAL``...); empty: any. A line without a header (an exception line, a block's
    body) matches as before: only a header can say a line is not an error."""

    @cached_property
    def regex(self) -> re.Pattern[bytes]:
        """``pattern`` compiled over bytes (offsets stay exact on invalid UTF-8), when first
        used: most rules never confirm a match in a run, and compiling the packs' patterns
        was a third of a command's start-up. :func:`load_rules` checked that it compiles."""
        return regex.compile(self.pattern.encode("utf-8"), RULE_FLAGS)


RULE_FLAGS = re.MULTILINE
"""A rule's ``^`` and ``$`` are the start and end of a line, wherever the line is in a chunk
(without it ``^`` held only at a chunk's first byte, and ``$`` only at its end on the paths
that search a whole chunk: a rule ending in ``$`` missed every line but the last)."""

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""What ``levels`` may name: the levels every parsed header is normalised to."""

QUIET_WINDOW = 2048
"""How far back, in bytes of the same chunk, ``quiet_after`` looks."""


@dataclass(frozen=True)
class ThresholdRule:
    """A rule over collector samples: fires when ``field op value`` becomes true."""

    id: str
    """Unique id."""
    category: Category
    """The failure category."""
    severity: Severity
    """How bad."""
    role: Role
    """Root cause or symptom."""
    sources: tuple[str, ...]
    """Collectors it reads."""
    conditions: tuple[tuple[str, str, Any], ...]
    """(field, op, value) comparisons over the sample's values; all must hold."""
    hold: float
    """Seconds the conditions must hold in a row before the rule fires (0: at once)."""
    subject: str
    """Template of the failing thing, filled from the sample's values."""
    summary: str
    """Template of the summary."""
    explain: str
    """What it means and what to check."""
    remediation: tuple[tuple[PlannedAction, ...], ...]
    """Ordered steps."""
    file: str = ""
    """``file:line``."""


@dataclass(frozen=True)
class RuleSet:
    """Everything loaded."""

    text: tuple[Rule, ...]
    """Text rules."""
    thresholds: tuple[ThresholdRule, ...]
    """Sample rules."""
    catalogue_dirs: tuple[Path, ...] = ()
    """Site code catalogues (a ``catalogues/`` folder in a site rules directory)."""


def builtin_pack_dir() -> Path:
    """The packs shipped with the doctor."""
    return Path(str(resources.files("ascend_doctor.rules") / "packs"))


def load_rules(dirs: list[Path] | None = None, *, check_safety: bool = True) -> RuleSet:
    """Load every ``*.yaml`` of the builtin packs, then of ``dirs`` (site rules).

    A site rule with the id of a loaded rule overrides the fields it names (the rest
    stay as shipped); a new id adds a rule; ``disable: [ids]`` at the top of a site
    file removes rules. Unknown ids in ``disable`` are an error (a typo would
    otherwise silently keep a rule on). A ``catalogues/`` folder in a site directory adds
    code catalogues (same format as the shipped ones; a code may not be defined twice).
    A pattern that does not compile, or is unsafe on untrusted lines (:mod:`rules.safety`),
    stops the load with its file and line; ``check_safety=False`` (``rules lint``, which
    names every unsafe pattern at once) skips the second check.
    """
    text: dict[str, Rule] = {}
    thresholds: dict[str, ThresholdRule] = {}
    raws: dict[str, dict[str, Any]] = {}
    for d in [builtin_pack_dir(), *(dirs or [])]:
        if not d.is_dir():
            raise RuleError(f"{d}: rules directory does not exist")
        for path in sorted(d.glob("*.yaml")):
            _load_file(path, text, thresholds, raws, site=d != builtin_pack_dir())
    _check_patterns(text.values(), safety=check_safety)
    catalogues = tuple(d / "catalogues" for d in dirs or [] if (d / "catalogues").is_dir())
    return RuleSet(tuple(text.values()), tuple(thresholds.values()), catalogues)


_CHECKED = "patterns"
"""Cache namespace: the pattern sets that compiled, by the hash of their text."""


def _check_patterns(rules: Any, *, safety: bool = True) -> None:
    """Every rule's pattern compiles and is safe to run over untrusted lines
    (:mod:`rules.safety`), or a RuleError with its file, line and why. A set of patterns that
    passed before (the same texts, the same Python) is not checked again: the check is
    remembered in the cache (:mod:`core.cache`) and each rule compiles when first used."""
    rules = list(rules)
    key = cache.key_of("patterns-5", sys.version, str(safety), *(_texts(r) for r in rules))
    if cache.read(_CHECKED, key) is not None:
        # the rules compile when first used, maybe in a forked worker that keeps nothing:
        # the opcodes of any the table lacks are learnt here (once: the table keeps them)
        regex.learn((r.pattern.encode("utf-8") for r in rules), RULE_FLAGS)
        return
    for rule in rules:
        try:
            rule.regex  # noqa: B018 - compiled here, kept for the run
        except re.error as exc:
            raise RuleError(
                f"{rule.file}: rule '{rule.id}' pattern does not compile: {exc}"
            ) from None
        for name, text in (("pattern", rule.pattern), ("quiet_after", _quiet_text(rule))):
            problems = pattern_problems(text) if safety and text else []
            if problems:
                raise RuleError(
                    f"{rule.file}: rule '{rule.id}' {name} is unsafe on untrusted lines: "
                    f"{'; '.join(problems)}"
                )
    cache.write(_CHECKED, key, b"ok")


def _quiet_text(rule: Rule) -> str:
    return rule.quiet_after.pattern.decode("utf-8") if rule.quiet_after is not None else ""


def _texts(rule: Rule) -> str:
    return f"{rule.pattern}\0{_quiet_text(rule)}"


def _load_file(
    path: Path,
    text: dict[str, Rule],
    thresholds: dict[str, ThresholdRule],
    raws: dict[str, dict[str, Any]],
    *,
    site: bool,
) -> None:
    try:
        doc = load_yaml(path)
    except (OSError, YamlError) as exc:
        raise RuleError(f"{path}: cannot load rules: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rules", []), list):
        raise RuleError(f"{path}: expected a mapping with a 'rules' list")
    for rid in doc.get("disable", []) if site else []:
        if str(rid) not in raws:
            raise RuleError(f"{path}: 'disable' names unknown rule '{rid}'")
        text.pop(str(rid), None)
        thresholds.pop(str(rid), None)
    for raw in doc.get("rules", []):
        if not isinstance(raw, dict):
            raise RuleError(f"{path}: every entry of 'rules' must be a mapping")
        where = f"{path}:{raw.get('__line__', '?')}"
        rid = raw.get("id")
        if not isinstance(rid, str) or not rid:
            raise RuleError(f"{where}: rule without an 'id'")
        if not site and rid in raws:
            raise RuleError(f"{where}: rule '{rid}' is defined twice")
        if site and rid in raws:
            raw = {**raws[rid], **raw}  # override only the fields the site names
        raws[rid] = raw
        if "when" in raw:
            thresholds[rid] = _threshold(raw, rid, where)
        else:
            text[rid] = _text(raw, rid, where)


def _common(raw: dict[str, Any], rid: str, where: str, keys: list[str]) -> dict[str, Any]:
    def bad(key: str, expected: str) -> RuleError:
        return RuleError(
            f"{where}: rule '{rid}' key '{key}' is {raw.get(key)!r}: expected {expected}"
        )

    unknown = [k for k in raw if k not in keys and k != "__line__"]
    if unknown:
        raise RuleError(f"{where}: rule '{rid}' has unknown keys {unknown}; known: {keys}")
    try:
        category = Category(str(raw.get("category")))
    except ValueError:
        raise bad("category", "one of " + ", ".join(c.value for c in Category)) from None
    try:
        severity = Severity.parse(str(raw.get("severity", "")))
    except ConfigError as exc:
        raise bad("severity", str(exc).split("expected ", 1)[-1]) from None
    try:
        role = Role(raw.get("role", "root"))
    except ValueError:
        raise bad("role", "root or symptom") from None
    summary = raw.get("summary")
    if not isinstance(summary, str) or not summary:
        raise bad("summary", "a non-empty template string")
    source = raw.get("source")
    sources = (source,) if isinstance(source, str) else source
    if not isinstance(sources, list | tuple) or not sources:
        raise bad("source", "a source name or a list of them")
    return {
        "id": rid,
        "category": category,
        "severity": severity,
        "role": role,
        "sources": tuple(str(s) for s in sources),
        "subject": str(raw.get("subject", "server")),
        "summary": summary,
        "explain": str(raw.get("explain", "")).strip(),
        "remediation": _steps(raw.get("remediation", []), rid, where),
        "file": where,
    }


def _steps(raw: Any, rid: str, where: str) -> tuple[tuple[PlannedAction, ...], ...]:
    if not isinstance(raw, list):
        raise RuleError(f"{where}: rule '{rid}' key 'remediation' must be a list of steps")
    steps = []
    for step in raw:
        items = step if isinstance(step, list) else [step]
        actions = []
        for item in items:
            if isinstance(item, str):
                actions.append(PlannedAction(item))
            elif isinstance(item, dict):
                item = {k: v for k, v in item.items() if k != "__line__"}
                if len(item) != 1:
                    raise RuleError(f"{where}: rule '{rid}' remediation item {item!r}: one action")
                ((name, params),) = item.items()
                if params is not None and not isinstance(params, dict):
                    raise RuleError(f"{where}: rule '{rid}' action '{name}': params must be a map")
                clean = {k: v for k, v in (params or {}).items() if k != "__line__"}
                actions.append(PlannedAction(str(name), clean))
            else:
                raise RuleError(f"{where}: rule '{rid}' remediation item {item!r} is not an action")
        steps.append(tuple(actions))
    return tuple(steps)


def _text(raw: dict[str, Any], rid: str, where: str) -> Rule:
    common = _common(raw, rid, where, _TEXT_KEYS)
    bad_sources = [s for s in common["sources"] if s not in SOURCES]
    if bad_sources:
        raise RuleError(f"{where}: rule '{rid}' source {bad_sources}: expected some of {SOURCES}")
    pattern = raw.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise RuleError(f"{where}: rule '{rid}' has no 'pattern'")
    examples = raw.get("examples") or {}
    if not isinstance(examples, dict) or not examples.get("match"):
        raise RuleError(f"{where}: rule '{rid}' needs examples with at least one 'match' line")
    ex = {k: tuple(str(x) for x in examples.get(k) or ()) for k in ("match", "no_match")}
    generic = raw.get("generic", False)
    if not isinstance(generic, bool):
        raise RuleError(f"{where}: rule '{rid}' key 'generic' is {generic!r}: expected true/false")
    quiet = raw.get("quiet_after")
    quiet_regex = None
    if quiet is not None:
        if not isinstance(quiet, str) or not quiet:
            raise RuleError(f"{where}: rule '{rid}' key 'quiet_after' must be a pattern")
        try:
            quiet_regex = regex.compile(quiet.encode("utf-8"))
        except re.error as exc:
            raise RuleError(f"{where}: rule '{rid}' quiet_after does not compile: {exc}") from None
    return Rule(
        pattern=pattern,
        examples=ex,
        generic=generic,
        quiet_after=quiet_regex,
        levels=_levels(raw.get("levels"), rid, where),
        **common,
    )


def _levels(raw: Any, rid: str, where: str) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not raw or any(x not in LEVELS for x in raw):
        raise RuleError(
            f"{where}: rule '{rid}' key 'levels' is {raw!r}: expected a list of {', '.join(LEVELS)}"
        )
    return frozenset(raw)


def _threshold(raw: dict[str, Any], rid: str, where: str) -> ThresholdRule:
    common = _common(raw, rid, where, _THRESHOLD_KEYS)
    bad_sources = [s for s in common["sources"] if s not in SAMPLE_SOURCES]
    if bad_sources:
        raise RuleError(
            f"{where}: rule '{rid}' source {bad_sources}: expected some of {SAMPLE_SOURCES}"
        )
    when = raw["when"]
    expected = f"{{field, op, value}} or {{all: [...]}}, optional 'for: SECONDS', op in {OPS}"
    if not isinstance(when, dict):
        raise RuleError(f"{where}: rule '{rid}' 'when' must be {expected}")
    items = when.get("all", [when])
    conditions = []
    for c in items if isinstance(items, list) else [None]:
        if not isinstance(c, dict) or c.get("op") not in OPS or "field" not in c:
            raise RuleError(f"{where}: rule '{rid}' 'when' must be {expected}")
        conditions.append((str(c["field"]), str(c["op"]), c.get("value")))
    hold = when.get("for", 0)
    if isinstance(hold, bool) or not isinstance(hold, int | float) or hold < 0:
        raise RuleError(f"{where}: rule '{rid}' 'when.for' is {hold!r}: expected seconds >= 0")
    return ThresholdRule(conditions=tuple(conditions), hold=float(hold), **common)


__all__ = ["SAMPLE_SOURCES", "SOURCES", "Rule", "RuleSet", "ThresholdRule", "load_rules"]
