"""What remediation actions may look at and act on: the policy's config, the store, the
watched server (through :class:`ServerSide`) and the host's tools."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.events import Outcome
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.core.records import Artifact
from ascend_doctor.core.store import Store

if TYPE_CHECKING:  # the keeper brings an HTTP client: status and incidents need none
    from ascend_doctor.collectors.evidence import Keeper


class ServerSide(Protocol):
    """The watched server as remediation sees it (``agent/server.py`` is the real one)."""

    @property
    def supervised(self) -> bool:
        """The doctor runs the server: it may change, stop and restart it."""
        ...

    @property
    def attached(self) -> bool:
        """Attach mode: the server is someone else's; launch changes are suggested."""
        ...

    @property
    def can_restart(self) -> bool:
        """Attach mode with a restart command: ``restart`` runs it."""
        ...

    @property
    def pid(self) -> int | None:
        """The server's main pid now (None when it does not run)."""
        ...

    @property
    def own_pids(self) -> set[int]:
        """PIDs the server's processes have had (never foreign holders of a device)."""
        ...

    @property
    def base_env(self) -> Mapping[str, str]:
        """The environment the server inherits."""
        ...

    def spec(self) -> LaunchSpec:
        """The server's effective launch spec (base + overrides)."""
        ...

    @property
    def healthy(self) -> bool:
        """Running, and its last ``/health`` probe answered 200."""
        ...

    def running(self) -> bool:
        """Whether a server process exists."""
        ...

    async def stop(self, reason: str) -> None:
        """Stop the server and keep it stopped."""
        ...


@dataclass
class HostTools:
    """The host's tools and places an action may use."""

    npu_smi: str = "npu-smi"
    """The npu-smi binary."""
    npu_smi_timeout: float = 10.0
    """Timeout of read-only npu-smi calls."""
    evidence: Keeper | None = None
    """Takes collect_diagnostics' snapshots (None: nowhere to write them)."""
    profile: Callable[[], Awaitable[Artifact]] | None = None
    """Records a profile of the running server; None when profiling is not set up."""


@dataclass
class Context:
    """What actions may look at and act on."""

    config: RemediationConfig
    """The remediation policy."""
    store: Store
    """Where overrides and decisions go."""
    server: ServerSide
    """The watched server."""
    host: HostTools
    """npu-smi, the diagnostics dir, the logs, the profiler."""
    sleep: Callable[[float], Awaitable[None]]
    """Injectable wait."""
    clock: Callable[[], float]
    """Wall clock."""

    def spec(self) -> LaunchSpec:
        """The server's effective launch spec."""
        return self.server.spec()

    def npu_smi(self) -> str:
        """The npu-smi binary as the server's PATH finds it."""
        from ascend_doctor.collectors.npu_smi import npu_smi_binary  # loads every collector

        return npu_smi_binary(self.host.npu_smi, self.server.base_env)

    def devices(self) -> list[int]:
        """The NPUs the server uses (``ASCEND_RT_VISIBLE_DEVICES``), [] when unknown."""
        return self.server.spec().devices(self.server.base_env)


@dataclass(frozen=True)
class Evidence:
    """What the incident's findings captured."""

    captures: dict[str, str]
    """Merged captures, the root finding's winning."""


@dataclass(frozen=True)
class Done:
    """An action's outcome before it is stamped and recorded."""

    outcome: Outcome
    """What became of it."""
    reason: str
    """Why, in words."""
    params: dict[str, Any] = field(default_factory=dict)
    """What it did or would do."""
    restart: bool = False
    """The server must be (re)started for this to take effect."""
    override: tuple[str, str, str] | None = None
    """(key, kind, value) to store as a launch override."""


__all__ = ["Context", "Done", "Evidence", "HostTools", "ServerSide"]
