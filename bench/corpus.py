"""The accuracy corpus (tests/corpus/): loading it, the four forms of a line, scoring one entry.

Used by ``bench/accuracy.py``. Every entry is scored on its own: a fresh engine per entry and
per form, its text as one stream of its own, so nothing one entry printed can help or hide
another (an engine that learns templates or suppresses repeats would otherwise leak).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from ascend_doctor.collectors.logs import read_chunks, source_kind
from ascend_doctor.core.events import Category, Finding, LogChunk, Severity
from ascend_doctor.rules.infer import PREFIX as INFERRED

FORMS = ("raw", "vllm", "rank", "kubelet", "docker")
"""raw: as the line is without any posted prefix; then the three prefixes added to each line;
docker: each line a record of Docker's json-file log driver, as a node running Docker keeps a
container's output (server-stream entries only: CANN's and the kernel's logs are files of their
own, read as written)."""

PREFIX = {
    "raw": "",
    "vllm": "(Worker_TP0 pid=1234) ",
    "rank": "[rank0]: ",
    "kubelet": "2026-12-01T10:00:00.123456789Z stderr F ",
    "docker": "",
}

# Prefixes a line may have been posted with; stripped (repeatedly: a kubelet prefix may hold a
# vLLM process tag) to get the raw form. The compose prefix needs a name, then blanks, then
# "| ", so an npu-smi table row ("| 0  910B3 ...") is never taken for one.
_POSTED = [
    re.compile(
        r"^\([A-Za-z][\w.=-]*(?: [\w.=-]+)*? pid=\d+(?:, ip=[\d.]+)?\) "
    ),  # (EngineCore pid=N)
    re.compile(r"^\[rank\d+\]: ?"),
    re.compile(
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) std(?:out|err) [FP] "
    ),
    re.compile(r"^[A-Za-z0-9][\w.-]*\s+\| (?=\S)"),  # docker compose: "vllm-1  | "
]

# Where `rules scan` would find a file of each kind: its kind is inferred from this path by the
# same function, so an entry is scanned as a file of that kind would be.
KIND_PATH = {
    "server": "server.log",
    "plog": "ascend/log/debug/plog/plog-1234_20250101000000000.log",
    "slog": "ascend/log/debug/device-os-0/device-os-0_20250101000000000.log",
    "device": "ascend/log/debug/device-0/device-0_20250101000000000.log",
    "host": "var/log/kern.log",
}

VALID_CATEGORIES = frozenset(c.value for c in Category)


class CorpusError(Exception):
    """A corpus file that does not have the expected shape (file, line and what was expected)."""


class Scanner(Protocol):
    """What scoring needs of an engine: the findings of one chunk."""

    def scan(self, chunk: LogChunk) -> list[Finding]:
        """Findings in one chunk."""
        ...


EngineFactory = Callable[[], Scanner]


@dataclass(frozen=True)
class Entry:
    """One corpus line (or block) with what it is."""

    id: str
    """Stable id (``h-0001``, ``d-0001``)."""
    text: str
    """The line as posted; a block has ``\\n`` inside."""
    category: str | None
    """Expected category (failures); None for benign lines."""
    kind: str
    """Stream kind it is scanned as (server, plog, slog, device, host)."""
    source: str
    """Where it was taken from (URL)."""


@dataclass
class Outcome:
    """What the engine said of one entry in one form."""

    categories: set[str] = field(default_factory=set)
    """Categories of its findings of severity warning or above (the ones that are surfaced)."""
    known: set[str] = field(default_factory=set)
    """Those given by a rule or a catalogued code, not inferred from the error's words
    (rules/infer.py)."""


def strip_prefixes(line: str) -> str:
    """The line without the prefixes it was posted with."""
    changed = True
    while changed:
        changed = False
        for pattern in _POSTED:
            stripped = pattern.sub("", line, count=1)
            if stripped != line:
                line, changed = stripped, True
    return line


def in_form(text: str, form: str) -> str:
    """Every line of ``text`` stripped of its posted prefixes, then given the form's prefix
    (``docker``: written as a json-file record, see :func:`docker_record`)."""
    lines = [strip_prefixes(line) for line in text.split("\n")]
    if form == "docker":
        return "\n".join(docker_record(line) for line in lines)
    prefix = PREFIX[form]
    return "\n".join(prefix + line for line in lines)


def docker_record(line: str) -> str:
    """``line`` as Docker's json-file driver writes it: ``{"log":"<line>\\n","stream":
    "stderr","time":"..."}``, escaped as Go's encoder does (``<``, ``>`` and ``&`` too;
    https://docs.docker.com/engine/logging/drivers/json-file/)."""
    body = json.dumps(line + "\n", ensure_ascii=False)
    body = body.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'{{"log":{body},"stream":"stderr","time":"2026-12-01T10:00:00.123456789Z"}}'


def load_entries(path: Path, prefix: str, *, failures: bool) -> list[Entry]:
    """The entries of one JSONL file; a missing file is empty. Bad lines raise CorpusError."""
    if not path.is_file():
        return []
    entries: list[Entry] = []
    seen: set[str] = set()
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{path}:{n}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{where}: not JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise CorpusError(f"{where}: expected a JSON object")
        entries.append(_entry(obj, where, prefix, failures=failures))
        if entries[-1].id in seen:
            raise CorpusError(f"{where}: duplicate id {entries[-1].id!r}")
        seen.add(entries[-1].id)
    return entries


def _entry(obj: dict[str, Any], where: str, prefix: str, *, failures: bool) -> Entry:
    for key in ("id", "text", "source"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise CorpusError(f"{where}: expected a non-empty string '{key}'")
    category = None
    if failures:
        category = obj.get("category")
        if category not in VALID_CATEGORIES:
            raise CorpusError(
                f"{where}: 'category' is {category!r}, expected one of "
                + ", ".join(sorted(VALID_CATEGORIES))
            )
    kind = obj.get("source_kind", "server")
    if kind not in KIND_PATH:
        raise CorpusError(
            f"{where}: 'source_kind' is {kind!r}, expected one of {sorted(KIND_PATH)}"
        )
    return Entry(f"{prefix}{obj['id']}", obj["text"], category, kind, obj["source"])


def scan_text(text: str, kind: str, new_engine: EngineFactory) -> Outcome:
    """Scan ``text`` as a whole file of ``kind`` with a fresh engine, as ``rules scan`` does."""
    path = KIND_PATH[kind]
    engine = new_engine()
    outcome = Outcome()
    data = (text + "\n").encode("utf-8")
    for chunk in read_chunks(io.BytesIO(data), path, source_kind(path)):
        for finding in engine.scan(chunk):
            if finding.severity >= Severity.WARNING:
                outcome.categories.add(finding.category.value)
                if not finding.rule.startswith(INFERRED):
                    outcome.known.add(finding.category.value)
    return outcome


def score_entries(
    entries: Iterable[Entry], new_engine: EngineFactory
) -> dict[str, dict[str, Outcome]]:
    """Outcome of every entry in every form: ``{form: {entry id: outcome}}``."""
    result: dict[str, dict[str, Outcome]] = {form: {} for form in FORMS}
    for entry in entries:
        for form in FORMS:
            # a container's output is the server's stream: other streams are read as written
            shown = "raw" if form == "docker" and entry.kind != "server" else form
            result[form][entry.id] = scan_text(in_form(entry.text, shown), entry.kind, new_engine)
    return result


@dataclass(frozen=True)
class Incident:
    """A whole posted log and the root cause the maintainers named."""

    name: str
    """Folder name."""
    log: Path
    """The log file."""
    category: str
    """``root_cause_category``."""
    text: str
    """``root_cause_text``: a substring of the line named as the cause."""
    source: str
    """Where the log was posted."""


def load_incidents(folder: Path) -> list[Incident]:
    """Every ``incidents/<name>/`` with a ``log.txt`` and a ``meta.yaml``."""
    if not folder.is_dir():
        return []
    out = []
    for d in sorted(p for p in folder.iterdir() if p.is_dir()):
        meta_path, log = d / "meta.yaml", d / "log.txt"
        if not meta_path.is_file() or not log.is_file():
            raise CorpusError(f"{d}: expected log.txt and meta.yaml")
        try:
            meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise CorpusError(f"{meta_path}: not YAML: {exc}") from None
        if not isinstance(meta, dict):
            raise CorpusError(f"{meta_path}: expected a mapping")
        for key in ("root_cause_category", "root_cause_text", "source"):
            if not isinstance(meta.get(key), str) or not meta[key]:
                raise CorpusError(f"{meta_path}: expected a non-empty string '{key}'")
        if meta["root_cause_category"] not in VALID_CATEGORIES:
            raise CorpusError(
                f"{meta_path}: root_cause_category {meta['root_cause_category']!r} is unknown"
            )
        if meta["root_cause_text"] not in log.read_text(encoding="utf-8", errors="replace"):
            raise CorpusError(f"{meta_path}: root_cause_text does not occur in {log.name}")
        out.append(
            Incident(
                d.name, log, meta["root_cause_category"], meta["root_cause_text"], meta["source"]
            )
        )
    return out


def judge_incident(incident: Incident, report: dict[str, Any]) -> dict[str, Any]:
    """Whether a ``diagnose --json`` report ranks the incident's root cause first."""
    causes: list[dict[str, Any]] = report.get("root_causes") or []
    first: dict[str, Any] = causes[0] if causes else {}
    right = first.get("category") == incident.category
    evidence = right and any(incident.text in e.get("text", "") for e in first.get("evidence", []))
    return {
        "name": incident.name,
        "expected": incident.category,
        "first": first.get("category"),
        "root_cause_first": right,
        "evidence_has_text": bool(evidence),
        "root_causes": [c.get("category") for c in causes],
    }
