"""Code catalogues: what a printed code means, kept as data under ``rules/catalogues/``.

Each YAML file holds one kind of code (ACL/runtime return codes, runtime reason texts,
CANN error-message codes, HCCL results, NPU device fault codes, dcmi returns) and every
entry names its category, severity, role, a one-line meaning and the public source it
was taken from. One code has one meaning: a code listed twice is an error. A ``generic``
entry (an internal-error code, an HCCL "internal error") yields to a more specific code or
phrase found in the same block.
"""

from __future__ import annotations

import functools
import gc
import marshal
import sys
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from ascend_doctor.core import cache, events, regex
from ascend_doctor.core.errors import RuleError
from ascend_doctor.core.events import Category, PlannedAction, Role, Severity
from ascend_doctor.rules.yamlload import YamlError, load_yaml

_NAMESPACE = "catalogues"
_KEEP = 4

KINDS = ("acl", "runtime_reason", "cann", "hccl", "device_fault", "dcmi")
"""The kinds of catalogue; a file's ``kind`` names one."""

LEVELS = (
    "NotHandleFault",
    "RestartRequest",
    "RestartBusiness",
    "FreeRestartNPU",
    "RestartNPU",
    "SeparateNPU",
)
"""MindCluster device-plugin fault levels, least to most severe."""

Steps = tuple[tuple[PlannedAction, ...], ...]

# Remediation follows the fault level MindCluster gives a device fault code: restart the
# business for the RestartBusiness/RestartRequest levels, reset the chip (server stopped
# first) for the reset levels, nothing automatic to report-only or isolate levels.
_RESTART: Steps = ((PlannedAction("restart"),),)
_RESET: Steps = ((PlannedAction("reset_device"), PlannedAction("restart")),)
_LEVEL_PLAN: dict[str, Steps] = {
    "NotHandleFault": (),
    "RestartRequest": _RESTART,
    "RestartBusiness": _RESTART,
    "FreeRestartNPU": _RESET,
    "RestartNPU": _RESET,
    "SeparateNPU": (),
}
_PLANS: dict[str, Steps] = {
    "none": (),
    "restart": _RESTART,
    "reset_and_restart": _RESET,
    "allocator": (
        (
            PlannedAction(
                "set_env", {"name": "PYTORCH_NPU_ALLOC_CONF", "value": "expandable_segments:True"}
            ),
            PlannedAction("lower_gpu_memory_utilization"),
            PlannedAction("restart"),
        ),
        (PlannedAction("lower_max_num_seqs"), PlannedAction("restart")),
    ),
    "enforce_eager": ((PlannedAction("enforce_eager"), PlannedAction("restart")),),
}


@dataclass(frozen=True)
class Entry:
    """One code of a catalogue."""

    kind: str
    """Which catalogue: one of ``KINDS``."""
    code: str
    """The code as a key: decimal for numbers, upper-case for CANN and hex codes."""
    category: Category
    """The failure category the code stands for (``unrecognised`` when it names no family)."""
    severity: Severity
    """How bad."""
    role: Role
    """Root cause or symptom."""
    meaning: str
    """One line: what the code means."""
    sources: tuple[str, ...]
    """Public sources the entry was taken from."""
    generic: bool = False
    """An internal or catch-all code: yields to a more specific code or phrase in its block."""
    name: str = ""
    """The symbolic name, e.g. ``ACL_ERROR_RT_LOST_HEARTBEAT`` or ``Memory_Allocation_Failure``."""
    level: str = ""
    """For device fault codes: MindCluster's fault level."""
    remediation: Steps = ()
    """Ordered remediation steps (from ``plan`` or the fault level)."""
    target: str = ""
    """For runtime reason texts: the ACL code the text stands for."""
    where: str = ""
    """``file:line`` of the entry."""


@dataclass
class Catalogues:
    """Every catalogue, by kind then code."""

    by_kind: dict[str, dict[str, Entry]] = field(default_factory=dict)
    """``by_kind[kind][code]``."""

    def get(self, kind: str, code: str) -> Entry | None:
        """The entry of ``code`` in catalogue ``kind``; runtime reasons resolve to ACL codes."""
        entry = self.by_kind.get(kind, {}).get(code)
        if entry is not None and entry.kind == "runtime_reason":
            return self.by_kind.get("acl", {}).get(entry.target)
        return entry

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_kind.values())


def builtin_catalogue_dir() -> Path:
    """The catalogues shipped with the doctor."""
    return Path(str(resources.files("ascend_doctor.rules") / "catalogues"))


def check_catalogues(dirs: list[Path] | None = None) -> tuple[Catalogues, list[str]]:
    """Load every catalogue; return what loaded and every problem found (never raises)."""
    cats = Catalogues()
    problems: list[str] = []
    for d in [builtin_catalogue_dir(), *(dirs or [])]:
        for path in sorted(d.glob("*.yaml")) if d.is_dir() else []:
            _load_file(path, cats, problems)
    for code, entry in cats.by_kind.get("runtime_reason", {}).items():
        if entry.target not in cats.by_kind.get("acl", {}):
            problems.append(
                f"{entry.where}: reason '{code}' names ACL code {entry.target}: not in acl"
            )
    return cats, problems


def load_catalogues(dirs: list[Path] | None = None) -> Catalogues:
    """Load every catalogue; any problem stops start-up with file, line and what was expected.

    The shipped catalogues are read once per process (they are data of the release)."""
    if not dirs:
        return _builtin()
    cats, problems = check_catalogues(dirs)
    if problems:
        raise RuleError("invalid code catalogue:\n  " + "\n  ".join(problems))
    return cats


@functools.lru_cache(maxsize=1)
def _builtin() -> Catalogues:
    """The shipped catalogues, built once and then read from the cache (:mod:`core.cache`):
    checking and building 1,661 entries cost a scan's start-up 20 to 30 ms. The key names
    every shipped file's bytes and the code that builds and holds the entries (this module,
    ``core/events.py``), so a change to any is a new key."""
    paths = sorted(builtin_catalogue_dir().glob("*.yaml"))
    key = None
    try:
        key = cache.key_of(
            "catalogues-1",
            sys.version,
            Path(__file__).read_bytes(),
            Path(events.__file__).read_bytes(),
            *(part for p in paths for part in (p.name, p.read_bytes())),
        )
    except OSError:
        pass
    if key is not None and (cached := _cached(key)) is not None:
        return cached
    cats, problems = check_catalogues()
    if problems:
        raise RuleError("invalid code catalogue:\n  " + "\n  ".join(problems))
    if key is not None:
        _store(key, cats)
    return cats


_STEP_SETS: tuple[Steps, ...] = (
    (),
    *{id(s): s for s in (*_PLANS.values(), *_LEVEL_PLAN.values())}.values(),
)
"""Every remediation an entry can have (shared objects): the cache names one by its index."""
_FIELDS = tuple(f.name for f in fields(Entry) if f.name != "remediation")


def _plain(value: Any) -> Any:
    """A field as marshal holds it: an enum member as its value."""
    if isinstance(value, Severity):
        return int(value)
    return value.value if isinstance(value, Category | Role) else value


def _store(key: str, cats: Catalogues) -> None:
    index = {id(steps): i for i, steps in enumerate(_STEP_SETS)}
    rows = []
    for table in cats.by_kind.values():
        for e in table.values():
            if id(e.remediation) not in index:
                return  # a remediation of another shape: built each time
            values = tuple(_plain(getattr(e, n)) for n in _FIELDS)
            rows.append((values, index[id(e.remediation)]))
    try:
        blob = marshal.dumps(rows)
    except ValueError:
        return
    cache.write(_NAMESPACE, key, blob, keep=_KEEP)


def _cached(key: str) -> Catalogues | None:
    """The catalogues the cache holds under ``key``, or None (a miss, whatever the reason).
    Entries are made as ``pickle`` and ``copy`` make them, their fields set at once: a
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``."""
    blob = cache.read(_NAMESPACE, key)
    if blob is None:
        return None
    cats = Catalogues()
    categories = {c.value: c for c in Category}
    severities = {int(v): v for v in Severity}
    roles = {r.value: r for r in Role}
    new = object.__new__
    names = _FIELDS
    was = gc.isenabled()
    gc.disable()  # 1,661 objects that live as long as the process: no collection meanwhile
    try:
        for values, steps in marshal.loads(blob):
            entry = new(Entry)
            row = entry.__dict__
            row.update(zip(names, values, strict=True))
            row["category"] = categories[row["category"]]
            row["severity"] = severities[row["severity"]]
            row["role"] = roles[row["role"]]
            row["sources"] = tuple(row["sources"])
            row["remediation"] = _STEP_SETS[steps]
            cats.by_kind.setdefault(entry.kind, {})[entry.code] = entry
    except (ValueError, TypeError, KeyError, IndexError, EOFError):
        return None
    finally:
        if was:
            gc.enable()
    return cats


def _load_file(path: Path, cats: Catalogues, problems: list[str]) -> None:
    try:
        doc = load_yaml(path)
    except (OSError, YamlError) as exc:
        problems.append(f"{path}: cannot load catalogue: {exc}")
        return
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind not in KINDS:
        problems.append(f"{path}: 'kind' is {kind!r}: expected one of {', '.join(KINDS)}")
        return
    rows = doc.get("reasons" if kind == "runtime_reason" else "codes")
    if not isinstance(rows, list):
        problems.append(f"{path}: expected a list under 'codes' (or 'reasons')")
        return
    table = cats.by_kind.setdefault(kind, {})
    for raw in rows:
        entry = _entry(path, kind, raw, problems)
        if entry is None:
            continue
        if entry.code in table:
            problems.append(
                f"{entry.where}: duplicate {kind} code {entry.code}"
                f" (first at {table[entry.code].where})"
            )
            continue
        table[entry.code] = entry


def _entry(path: Path, kind: str, raw: Any, problems: list[str]) -> Entry | None:
    if not isinstance(raw, dict):
        problems.append(f"{path}: every entry must be a mapping")
        return None
    where = f"{path}:{raw.get('__line__', '?')}"
    sources = raw.get("source")
    sources = [sources] if isinstance(sources, str) else sources
    if not sources or not all(isinstance(s, str) and s.startswith("http") for s in sources):
        problems.append(f"{where}: entry has no 'source' (a public URL or a list of them)")
        return None
    if kind == "runtime_reason":
        reason, target = raw.get("reason"), raw.get("code")
        if not isinstance(reason, str) or not isinstance(target, int):
            problems.append(f"{where}: expected 'reason' (text) and 'code' (ACL number)")
            return None
        return Entry(
            kind,
            reason.lower(),
            Category.UNRECOGNISED,
            Severity.ERROR,
            Role.SYMPTOM,
            reason,
            tuple(sources),
            target=str(target),
            where=where,
        )
    code = raw.get("code")
    if not isinstance(code, int | str) or str(code) == "":
        problems.append(f"{where}: entry has no 'code'")
        return None
    try:
        category = Category(str(raw.get("category")))
    except ValueError:
        problems.append(f"{where}: code {code}: unknown category {raw.get('category')!r}")
        return None
    try:
        severity = Severity.parse(str(raw.get("severity", "error")))
        role = Role(str(raw.get("role", "root")))
    except ValueError as exc:
        problems.append(f"{where}: code {code}: {exc}")
        return None
    meaning = raw.get("meaning")
    if not isinstance(meaning, str) or not meaning.strip():
        problems.append(f"{where}: code {code}: no 'meaning'")
        return None
    level = str(raw.get("level", ""))
    if level and level not in LEVELS:
        problems.append(
            f"{where}: code {code}: level {level!r}: expected one of {', '.join(LEVELS)}"
        )
        return None
    plan = raw.get("plan")
    if plan is not None and plan not in _PLANS:
        problems.append(f"{where}: code {code}: plan {plan!r}: expected one of {', '.join(_PLANS)}")
        return None
    steps = _PLANS[plan] if plan else _LEVEL_PLAN.get(level, ())
    if category == Category.UNRECOGNISED:
        steps = ()  # an error nothing explains never triggers remediation
    return Entry(
        kind,
        _key(kind, code),
        category,
        severity,
        role,
        _readable(meaning),
        tuple(sources),
        generic=bool(raw.get("generic", False)),
        name=str(raw.get("name") or raw.get("title") or ""),
        level=level,
        remediation=steps,
        where=where,
    )


# CANN's message table keeps the printf arguments of a message ("Reason: %s."); a summary
# reads better without the empty ones
_EMPTY_ARG = regex.compile(r"\s*(?:Suggest|Reason|Solution|Possible Cause):\s*%s\.?|\s*\[%s\]|%s")


def _readable(meaning: str) -> str:
    text = _EMPTY_ARG.sub(lambda m: "" if m.group(0).strip()[:1] != "%" else "…", meaning)
    return " ".join(text.split()).replace(" .", ".").replace(" ,", ",")


def _key(kind: str, code: int | str) -> str:
    if kind in ("cann", "device_fault"):
        return str(code).upper().removeprefix("0X")
    return str(int(code)) if str(code).lstrip("-").isdigit() else str(code)


__all__ = [
    "KINDS",
    "LEVELS",
    "Catalogues",
    "Entry",
    "builtin_catalogue_dir",
    "check_catalogues",
    "load_catalogues",
]
