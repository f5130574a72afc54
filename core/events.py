"""The events that cross folder boundaries: frozen dataclasses and closed enums.

Nothing else crosses a folder boundary. Category ids are a public interface
(see docs/categories.md): the CLI's JSON, alerts and metrics use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from ascend_doctor.core.errors import ConfigError


class Severity(IntEnum):
    """How bad a finding is; ordered so that ``max()`` picks the worst."""

    INFO = 10
    WARNING = 20
    ERROR = 30
    CRITICAL = 40

    @property
    def label(self) -> str:
        """The lower-case name used in config, rules and JSON."""
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        """Parse ``info|warning|error|critical``; raises ConfigError otherwise."""
        try:
            return cls[text.upper()]
        except KeyError:
            choices = ", ".join(s.label for s in cls)
            raise ConfigError(f"{text!r}: expected one of {choices}") from None


class Category(StrEnum):
    """The failure categories of docs/categories.md; every rule names exactly one."""

    KV_CACHE_INSUFFICIENT = "kv_cache_insufficient"
    NPU_OOM = "npu_oom"
    DEVICE_BUSY = "device_busy"
    NPU_RESOURCE_EXHAUSTED = "npu_resource_exhausted"
    GRAPH_CAPTURE_ERROR = "graph_capture_error"
    AICORE_ERROR = "aicore_error"
    HCCL_TIMEOUT = "hccl_timeout"
    HCCL_LINK_ERROR = "hccl_link_error"
    DEVICE_FAULT = "device_fault"
    DEVICE_UNAVAILABLE = "device_unavailable"
    ENV_MISMATCH = "env_mismatch"
    ENGINE_DEAD = "engine_dead"
    PORT_IN_USE = "port_in_use"
    SERVER_HANG = "server_hang"
    MODEL_CONFIG_ERROR = "model_config_error"
    # Failures seen without a rule's words: an error nothing explains (a template-clustered
    # finding that never triggers remediation), a server exit nothing explains, the host's
    # OOM killer ending a server process.
    UNRECOGNISED = "unrecognised"
    SERVER_CRASHED = "server_crashed"
    HOST_OOM = "host_oom"
    # Failures that look healthy (/health 200): no answer to a canary with nothing running,
    # garbled output, memory that grows towards an OOM, latency far above its own baseline.
    SERVER_UNRESPONSIVE = "server_unresponsive"
    OUTPUT_CORRUPT = "output_corrupt"
    MEMORY_CREEP = "memory_creep"
    PERFORMANCE_REGRESSION = "performance_regression"


class ProcessState(StrEnum):
    """Supervisor states, in the Supervisor tradition."""

    STOPPED = "STOPPED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"  # /health answered 200, not merely "still alive"
    BACKOFF = "BACKOFF"
    STOPPING = "STOPPING"
    EXITED = "EXITED"
    FATAL = "FATAL"


class IncidentState(StrEnum):
    """Incident lifecycle: open -> mitigating -> resolved | escalated."""

    OPEN = "open"
    MITIGATING = "mitigating"
    RESOLVED = "resolved"
    ESCALATED = "escalated"


ACTIVE_STATES = (IncidentState.OPEN, IncidentState.MITIGATING)
"""The states of an incident still being dealt with (by the doctor or a human)."""


class Outcome(StrEnum):
    """What became of one remediation decision."""

    OK = "ok"
    FAILED = "failed"
    REFUSED = "refused"
    DRY_RUN = "dry_run"
    SUGGESTED = "suggested"
    UNKNOWN = "unknown"  # timed out: never retried automatically


class Role(StrEnum):
    """Whether a rule names a root cause or a consequence of one."""

    ROOT = "root"
    SYMPTOM = "symptom"


@dataclass(frozen=True, slots=True)
class PlannedAction:
    """One action of a remediation step, as a rule names it."""

    name: str
    """Action name, e.g. ``lower_max_model_len``."""
    params: dict[str, Any] = field(default_factory=dict)
    """Fixed parameters from the rule (e.g. the env var to set)."""


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Whole lines read from one source in one read."""

    path: str
    """The file the bytes came from."""
    source: str
    """The stream kind: ``server``, ``plog``, ``device``, ``slog`` or ``host``."""
    offset: int
    """Byte offset of ``data[0]`` in the file."""
    data: bytes
    """Whole lines, each ending in ``\\n``."""
    first_line: int = 0
    """1-based line number of the first line when known, else 0."""
    file_id: str = ""
    """Identity of the file (device:inode): with ``offset`` it names a line uniquely even
    after the path was reused by a rotation. Empty means "the path"."""
    lines: int = -1
    """How many newlines ``data`` holds when its reader counted them already, else -1 (the
    engine then counts them: a pass over the bytes saved when the reader did)."""


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of evidence cut out of a chunk."""

    path: str
    """The file the line came from."""
    offset: int
    """Byte offset of the line in its file."""
    text: str
    """The line without its newline (invalid UTF-8 replaced)."""
    line: int = 0
    """1-based line number when known, else 0."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One observation of a collector."""

    collector: str
    """The registered collector name, e.g. ``npu_smi``."""
    subject: str
    """What was observed, e.g. ``npu3`` or ``server``."""
    at: float
    """Wall-clock time (epoch seconds) of the observation."""
    values: dict[str, Any] = field(default_factory=dict)
    """Named values: ``health``, ``hbm_used_mb``, ``status``..."""


@dataclass(frozen=True, slots=True)
class ProcessEvent:
    """A change of the supervised server's state."""

    state: ProcessState
    """The state entered."""
    previous: ProcessState
    """The state left."""
    at: float
    """Wall-clock time of the change."""
    pid: int | None = None
    """PID of the server process, when one exists."""
    exit_code: int | None = None
    """Exit status, for a process that ended."""
    crashed: bool = False
    """True when the exit was a crash (including exit 0 after an engine-death line)."""
    reason: str = ""
    """Why the state changed, in words."""


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule matched: one recognised failure, with its evidence."""

    rule: str
    """Rule id."""
    category: Category
    """Failure category."""
    severity: Severity
    """How bad."""
    role: Role
    """Root cause or symptom."""
    subject: str
    """What failed: ``server`` or ``npu<N>``."""
    summary: str
    """One readable sentence, the rule's template filled with the captures."""
    at: float
    """Wall-clock time the doctor saw it."""
    captures: dict[str, str] = field(default_factory=dict)
    """Named captures of the rule's pattern."""
    evidence: tuple[LogLine, ...] = ()
    """The matched line first, then its context."""
    path: str = ""
    """Source file ("" for sample-based findings)."""
    offset: int = -1
    """Byte offset of the matched line; with ``file_id`` it deduplicates findings."""
    file_id: str = ""
    """Identity of the file the line came from (the path when not known)."""
    remediation: tuple[tuple[PlannedAction, ...], ...] = ()
    """The rule's ordered remediation steps; each step is actions applied together."""
    explain: str = ""
    """What it means and what to check."""
    generic: bool = False
    """A generic code or wrapper (a driver's "internal error", a catch-all HCCL code): as a
    cause it yields to a specific one found close to it (rules/ranking.py)."""


@dataclass(frozen=True, slots=True)
class ActionResult:
    """One remediation decision and its outcome."""

    name: str
    """Action name, e.g. ``lower_max_model_len``."""
    params: dict[str, Any]
    """What the action did or would do."""
    outcome: Outcome
    """ok, failed, refused, dry_run, suggested or unknown."""
    reason: str
    """Why this decision was taken, in words an operator reads."""
    at: float
    """Wall-clock time of the decision."""


@dataclass(frozen=True, slots=True)
class Incident:
    """Findings grouped by (category, subject), with a lifecycle."""

    id: int
    """Store id."""
    category: Category
    """Failure category of the root finding."""
    subject: str
    """What failed: ``server`` or ``npu<N>``."""
    state: IncidentState
    """Lifecycle state."""
    severity: Severity
    """Worst severity seen."""
    rule: str
    """Rule id of the root finding."""
    summary: str
    """Summary of the root finding."""
    opened_at: float
    """When it opened."""
    resolved_at: float | None = None
    """When it was resolved or escalated."""
    step: int = 0
    """Index of the next remediation step to run."""
    attempts: int = 0
    """Remediation attempts made."""
    acknowledged: bool = False
    """An operator acknowledged it."""
    plan: tuple[tuple[PlannedAction, ...], ...] = ()
    """The remediation plan of its root finding: ordered steps, each actions applied
    together (the root rule's ``remediation``, fixed when the root is known)."""


__all__ = [
    "ACTIVE_STATES",
    "ActionResult",
    "Category",
    "Finding",
    "Incident",
    "IncidentState",
    "LogChunk",
    "LogLine",
    "Outcome",
    "PlannedAction",
    "ProcessEvent",
    "ProcessState",
    "Role",
    "Sample",
    "Severity",
]
