"""Test doubles for the daemon's seams (the real ones are in agent/server.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ascend_doctor.core.launch import LaunchSpec


@dataclass
class FakeServer:
    """The watched server as remediation sees it (``ServerSide``), with its stops recorded."""

    spec_fn: Callable[[], LaunchSpec]
    base_env: Mapping[str, str] = field(default_factory=dict)
    supervised: bool = True
    attached: bool = False
    can_restart: bool = False
    own_pids: set[int] = field(default_factory=set)
    is_running: bool = False
    healthy: bool = False
    stopped: list[str] = field(default_factory=list)

    def spec(self) -> LaunchSpec:
        return self.spec_fn()

    def running(self) -> bool:
        return self.is_running

    async def stop(self, reason: str) -> None:
        self.stopped.append(reason)
        self.is_running = False
