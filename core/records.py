"""What the store shares between its writers and its readers, typed.

The daemon writes these and the CLI, the TUI and the bundle read them back as the same
dataclasses (``Store.doctor()``, ``Store.server()``...): a renamed field fails ``mypy`` and the
round-trip tests, never a reader at 3 a.m. Stored as JSON; a value that does not decode into
its record is a :class:`StoreError` naming the key, so a reader says "unreadable" instead of
guessing with defaults.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import ProcessState

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class DoctorStatus:
    """The running doctor, as it announced itself once its first log pass was done."""

    pid: int
    """The doctor's process id."""
    started_at: float
    """Wall time it started."""
    mode: str
    """``remediation.mode``: auto, suggest or off."""
    dry_run: bool
    """``--dry-run`` / ``remediation.dry_run``."""
    attached: bool
    """Attach mode: the server is someone else's."""
    remediation: RemediationConfig
    """The remediation bounds it runs with (the budget ``status`` shows is reckoned on these)."""
    proc_start: float = 0.0
    """The doctor process's start time as the kernel reports it (pid reuse check)."""


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """The supervised (or attached) server's state, as of its last change."""

    state: ProcessState
    """Supervisor state."""
    pid: int | None
    """Its process id while it has one."""
    since: float
    """Wall time of the change."""
    reason: str = ""
    """Why it changed, in words."""
    proc_start: float = 0.0
    """The server process's start time as the kernel reports it (pid reuse check)."""


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    """How one collector has been doing."""

    name: str
    """Registered collector name (``npu_smi``, ``vllm``, ``process``...)."""
    runs: int = 0
    """Runs so far."""
    failures: int = 0
    """Runs that failed."""
    ok: bool = True
    """Whether the last run succeeded."""
    last_ok_at: float | None = None
    """Wall time of the last good run."""
    last_error: str = ""
    """What the last failure said."""
    last_duration_s: float = 0.0
    """How long the last run took."""
    at: float = 0.0
    """Wall time of the last run."""
    last_raw: str = ""
    """The raw text a failing collector returned (npu-smi's own words), when it has any."""


@dataclass(frozen=True, slots=True)
class ProfileSummary:
    """What the analysis of a capture said (``collectors/profiling``), kept with it."""

    headline: str
    """One sentence naming the slow part."""
    report: str
    """The terminal report with bars, as ``profile analyze`` prints it."""
    slow_rank: int | None = None
    """The slow rank, if the ranks are uneven."""
    advisor: str = "not run"
    """msprof-analyze advisor's status (``ran: ...``, ``not installed``...)."""


@dataclass(frozen=True, slots=True)
class Artifact:
    """One captured profile on disk."""

    kind: str
    """``torch_profile`` or ``msprof_profile``."""
    path: str
    """Absolute path of the capture's top directory."""
    size_bytes: int
    """Total size of the files under ``path``."""
    started_at: float
    """Wall time (epoch seconds) the capture was started."""
    ended_at: float
    """Wall time (epoch seconds) the capture was stopped."""
    analysis: ProfileSummary | None = None
    """The analysis of the capture; None until analysed (or when it could not be)."""


@dataclass(frozen=True, slots=True)
class LaunchRecord:
    """The server command as the operator gave it (overrides are applied on top)."""

    argv: tuple[str, ...]
    """The command line."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment given for it beyond the doctor's own."""


@dataclass(frozen=True, slots=True)
class ProfilingSetup:
    """How the watched server can be profiled (``profiling.enabled``)."""

    torch_dir: str
    """The server's torch profiler output directory."""
    url: str
    """The server's base URL (``/start_profile``)."""
    msprof: bool = False
    """Whether it was started with ``PROFILING_MODE=dynamic`` for msprof."""


@dataclass(frozen=True, slots=True)
class ServerVersion:
    """The vLLM release the watched server runs, as the doctor learned it."""

    vllm: str
    """``vllm.__version__`` (``0.11.0``)."""
    source: str
    """Where it was read: ``vllm --version`` before a start, ``/version`` after one."""
    learned_at: float
    """Wall time it was read."""


@dataclass(frozen=True, slots=True)
class SinkStatus:
    """One alert sink's delivery state."""

    type: str
    """Sink type (pagerduty, slack...)."""
    role: str = ""
    """The sink's role in routing (``pager``, ``chat``...), as configured."""
    queued: int = 0
    """Alerts waiting in the outbox."""
    sent: int = 0
    """Alerts delivered."""
    failed: int = 0
    """Alerts the sink rejected for good."""
    silenced: int = 0
    """Alerts a silence held back."""
    failures: int = 0
    """Failed delivery attempts."""
    last_error: str = ""
    """What the last failure said."""
    last_error_at: float | None = None
    """Wall time of the last failure."""
    last_ok_at: float | None = None
    """Wall time of the last delivery."""
    paused_until: float | None = None
    """A 429 or outage pauses the sink until then."""


@dataclass(frozen=True, slots=True)
class BudgetEntry:
    """One remediation step that acted (the host budget and the breakers count these)."""

    at: float
    """When it acted."""
    category: str
    """The category of the incident it acted on."""
    incident: int = 0
    """The incident whose step it booked (0: a record written before this was kept)."""
    step: int = -1
    """Which step of that incident's plan."""


@dataclass(frozen=True, slots=True)
class Ledger:
    """The remediation brakes' memory: steps taken, acknowledgements, last run per action."""

    history: tuple[BudgetEntry, ...] = ()
    """Steps that acted within the breaker window."""
    acknowledged: dict[str, float] = field(default_factory=dict)
    """Category -> wall time an operator last acknowledged an incident of it."""
    last_run: dict[str, float] = field(default_factory=dict)
    """Cooldown key -> wall time that action last acted."""


@dataclass(frozen=True, slots=True)
class InFlight:
    """A remediation action that changes the server or a device, from before it acts until
    its step is counted: a doctor that dies in it leaves this behind, and the next one
    records it as interrupted (or, when its outcome was recorded, counts the step)."""

    incident_id: int
    """The incident it acts for."""
    action: str
    """The action's registry name (``reset_device``, ``restart``...)."""
    device: int | None
    """The device it acts on (a reset), None for the server."""
    started_at: float
    """Wall time it began."""
    step: int = -1
    """The incident's step when it began (-1: a record from before this was kept)."""


def encode(record: Any) -> Any:
    """A record as JSON-ready data."""
    return dataclasses.asdict(record)


def decode(cls: type[R], raw: Any, key: str) -> R:
    """``raw`` as a ``cls`` record; a StoreError naming ``key`` when it is not one."""
    try:
        return typing.cast(R, _value(cls, raw))
    except (StoreError, ValueError) as exc:  # ValueError: an enum value it does not know
        raise StoreError(
            f"store record '{key}' is not a {cls.__name__}: {exc} ({str(raw)[:80]!r})"
        ) from None


def _value(tp: Any, raw: Any) -> Any:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = get_args(tp)
        if raw is None and type(None) in options:
            return None
        inner = [t for t in options if t is not type(None)]
        return _value(inner[0], raw)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(raw, dict):
            raise StoreError(f"expected an object for {tp.__name__}")
        hints = get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp)}
        extra = set(raw) - known
        if extra:
            raise StoreError(f"unknown fields {sorted(extra)}")
        return tp(**{k: _value(hints[k], v) for k, v in raw.items()})
    if origin is tuple:
        return tuple(_value(get_args(tp)[0], v) for v in _list(raw))
    if origin is list:
        return [_value(get_args(tp)[0], v) for v in _list(raw)]
    if origin is dict:
        if not isinstance(raw, dict):
            raise StoreError("expected an object")
        kt, vt = get_args(tp)
        return {_value(kt, k): _value(vt, v) for k, v in raw.items()}
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(raw)
    if tp is float:
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise StoreError(f"expected a number, got {type(raw).__name__}")
        return float(raw)
    if tp in (int, str, bool):
        if not isinstance(raw, tp) or (tp is int and isinstance(raw, bool)):
            raise StoreError(f"expected {tp.__name__}, got {type(raw).__name__}")
        return raw
    if tp is Any:
        return raw
    raise StoreError(f"cannot decode {tp!r}")


def _list(raw: Any) -> list[Any]:
    if not isinstance(raw, list | tuple):
        raise StoreError("expected a list")
    return list(raw)


__all__ = [
    "Artifact",
    "BudgetEntry",
    "CollectorStatus",
    "DoctorStatus",
    "InFlight",
    "LaunchRecord",
    "Ledger",
    "ProfileSummary",
    "ProfilingSetup",
    "ServerStatus",
    "ServerVersion",
    "SinkStatus",
    "decode",
    "encode",
]
