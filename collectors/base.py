"""What every collector is and how one is registered (the node_exporter habit).

A collector has one job, ``collect() -> Sequence[Sample]``; the daemon's runner owns the
schedule, the timeout, the status record and the isolation (one failing collector never stops
another). Each collector file registers one :class:`CollectorSpec` under its name, and that name
is the config table (``[collectors.npu_smi]``), ``Sample.collector``, the store's status record
and the log field.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ascend_doctor.core.config import CollectorsConfig
from ascend_doctor.core.events import Sample


class Collector(Protocol):
    """One job: ``collect() -> samples``; a failure is a CollectorError (its ``raw`` and
    ``evidence`` say what the source printed)."""

    name: str

    def collect(self) -> Awaitable[Sequence[Sample]]:
        """One run."""
        ...


class Tally:
    """Tokens the canary was served since the vllm collector last looked: canary traffic
    counts against nothing the users see (their load, the latency baseline)."""

    def __init__(self) -> None:
        self._tokens = 0

    def add(self, tokens: int) -> None:
        """The canary was served ``tokens``."""
        self._tokens += max(0, tokens)

    def take(self) -> int:
        """Tokens served to the canary since the last call."""
        tokens, self._tokens = self._tokens, 0
        return tokens


@dataclass(frozen=True)
class CollectorContext:
    """What a collector may be built from: the config and the watched server."""

    config: CollectorsConfig
    """``[collectors]``."""
    server_url: str
    """The server's base URL ('' when no server is watched)."""
    server_pid: Callable[[], int | None]
    """The server's main pid now (None while it has none)."""
    npu_smi: str
    """The npu-smi binary, resolved on the server's PATH."""
    state_dir: Path | None = None
    """Where a collector may keep what it learned across doctor restarts (None: nowhere)."""
    launch_key: Callable[[], str] = lambda: ""
    """Names the server's launch now (model and flags): what a launch learned is its own."""
    busy: Callable[[], bool] = lambda: False
    """True while a remediation step runs: a collector that asks the server waits."""
    attached: bool = False
    """The server is someone else's (``watch --attach``)."""
    serving: Callable[[], bool] = lambda: True
    """The server is RUNNING: memory trends only count what grows while it serves (loading
    weights and allocating the KV cache at start is no creep)."""
    canary_tokens: Tally = field(default_factory=Tally)
    """Shared by the canary (adds) and the vllm collector (subtracts from the users' load)."""


@dataclass(frozen=True)
class CollectorSpec:
    """One registered collector."""

    name: str
    """The registered name."""
    build: Callable[[CollectorContext], Collector]
    """Makes the collector."""
    enabled: Callable[[CollectorsConfig], bool]
    """Whether its config table turns it on."""
    interval: Callable[[CollectorsConfig], float]
    """Seconds between runs."""
    needs_server: bool = False
    """Runs only when a server is watched (supervised or attached)."""
    while_running: bool = False
    """Runs only while the server is RUNNING (it asks the server itself), and waits one
    interval before its first run."""
    in_attach: Callable[[CollectorsConfig], bool] = lambda cfg: True
    """Whether it runs against an attached server (one that sends requests asks first)."""


__all__ = ["Collector", "CollectorContext", "CollectorSpec", "Tally"]
