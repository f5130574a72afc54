"""Several servers under one doctor: their config tables and the pure policy of who may stop.

The deployment guide's production layout is two vLLM-Ascend instances on one Atlas server
behind an nginx load balancer. One doctor supervises both (``[[servers]]``); ``[ha]`` says how
many of the *other* servers must be healthy before a planned stop of one (restart, relaunch
with new flags, device reset) and which commands take a server out of the balancer and put it
back. Nothing here does I/O: the agent asks and acts (``agent/fleet.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ascend_doctor.core import regex
from ascend_doctor.core.errors import ConfigError

SERVERS_DIR = "servers"
"""Under the state dir: one directory (its store, its log) per ``[[servers]]`` name."""

NAME = regex.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
"""A server's name: it names its state directory, so no slashes and no leading dot."""


@dataclass(frozen=True)
class ServerEntry:
    """One ``[[servers]]`` table: a server the doctor runs."""

    name: str = ""
    """Its name: in incident subjects, status, alerts and ``<state dir>/servers/<name>``."""
    command: tuple[str, ...] = ()
    """``vllm serve ...`` as an argv list (no shell)."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables added to its environment, e.g. ``ASCEND_RT_VISIBLE_DEVICES = "0,1,2,3"``:
    its cards, for device findings, resets and npu-smi samples."""
    url: str = ""
    """Base URL of its API; empty derives it from ``--host``/``--port`` in the command."""


@dataclass(frozen=True)
class HAConfig:
    """``[ha]``: planned stops of one server while the others serve."""

    min_healthy: int = 1
    """Other servers that must be healthy before one is stopped on purpose (with two or more
    servers; a server that died is restarted at once: nothing is left to protect)."""
    drain_command: tuple[str, ...] = ()
    """argv run before a planned stop (no shell); ``{name}`` and ``{url}`` are substituted."""
    undrain_command: tuple[str, ...] = ()
    """argv run once the server answers a completion again after a start."""
    drain_required: bool = True
    """A failing drain refuses the stop; false: the stop goes on, the failure recorded."""
    command_timeout: float = 30.0
    """Seconds a drain or undrain command may take."""
    drain_wait: float = 0.0
    """Seconds between a drain and the stop: requests in flight on the server finish (nginx
    keeps an old worker's connections after a reload until they are done)."""
    max_wait: float = 900.0
    """Seconds a planned stop waits for the other servers; then it is refused."""


def server_dir(state_dir: Path, name: str) -> Path:
    """Where one of several servers keeps its store and log."""
    return state_dir / SERVERS_DIR / name


def server_names(state_dir: Path) -> list[str]:
    """The servers a doctor of several servers keeps under ``state_dir`` ([] for one)."""
    root = state_dir / SERVERS_DIR
    try:
        return sorted(p.name for p in root.iterdir() if p.is_dir() and NAME.fullmatch(p.name))
    except OSError:
        return []


def check_servers(servers: Sequence[ServerEntry], ha: HAConfig) -> None:
    """Stop start-up on ``[[servers]]`` tables that cannot run: no name, a bad or repeated
    name, no command, or more healthy servers asked for than there are others."""
    seen: set[str] = set()
    for i, s in enumerate(servers):
        where = f"config 'servers[{i}]'"
        if not NAME.fullmatch(s.name):
            raise ConfigError(
                f"{where} has name {s.name!r}: expected letters, digits, '.', '_' or '-'"
            )
        if s.name in seen:
            raise ConfigError(f"{where}: the name {s.name!r} is used twice")
        seen.add(s.name)
        if not s.command:
            raise ConfigError(f"{where} ({s.name}) has no command: expected an argv list")
        for key in s.env:
            if not key or "=" in key:
                raise ConfigError(f"{where} ({s.name}) env key {key!r}: expected a variable name")
    if len(servers) >= 2 and ha.min_healthy > len(servers) - 1:
        raise ConfigError(
            f"config 'ha.min_healthy' is {ha.min_healthy}: expected at most "
            f"{len(servers) - 1} (the other servers of {len(servers)})"
        )


def required_healthy(ha: HAConfig, servers: int) -> int:
    """Other servers that must be healthy for a planned stop (0 with one server)."""
    return 0 if servers < 2 else ha.min_healthy


@dataclass(frozen=True)
class StopVerdict:
    """May a server be stopped on purpose now?"""

    allowed: bool
    """True: stop it; False: wait."""
    reason: str
    """Why, in words, for the decision record."""
    healthy: tuple[str, ...] = ()
    """The other servers that are healthy now."""


def may_stop(
    name: str, healthy: Mapping[str, bool], held: Sequence[str], required: int
) -> StopVerdict:
    """Whether ``name`` may be stopped now: at least ``required`` of the other servers are
    healthy and none of them is being stopped (``held``: passed the gate, not healthy again).
    """
    others = sorted(n for n, ok in healthy.items() if n != name and ok and n not in held)
    if len(others) >= required:
        said = ", ".join(others) if others else "none needed"
        return StopVerdict(True, f"{len(others)} other server(s) healthy ({said})", tuple(others))
    busy = sorted(n for n in held if n != name)
    why = f"{len(others)} of the other servers healthy, {required} needed"
    if busy:
        why += f"; {', '.join(busy)} not healthy again yet after its own stop"
    return StopVerdict(False, why, tuple(others))


def substitute(argv: Sequence[str], name: str, url: str) -> list[str]:
    """``argv`` with ``{name}`` and ``{url}`` replaced (only those two: a brace elsewhere
    stays as written); the values come from the config, never from log text."""
    return [a.replace("{name}", name).replace("{url}", url) for a in argv]


def device_number(subject: str) -> int | None:
    """The NPU a subject names (``npu3``, ``npu3.0``), None for any other subject."""
    if not subject.startswith("npu"):
        return None
    digits = subject[3:].split(".")[0]
    return int(digits) if digits.isdigit() else None


__all__ = [
    "NAME",
    "SERVERS_DIR",
    "HAConfig",
    "ServerEntry",
    "StopVerdict",
    "check_servers",
    "device_number",
    "may_stop",
    "required_healthy",
    "server_dir",
    "server_names",
    "substitute",
]
