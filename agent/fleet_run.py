"""``watch`` with ``[[servers]]``: one doctor, several servers, one asyncio loop.

Each server gets the whole daemon of one (``Daemon``: its supervisor, launch overrides, log,
store and incidents under ``<state dir>/servers/<name>``), and all of them share one
:class:`HAGate` so that a planned stop of one waits for the others (``agent/fleet.py``).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from ascend_doctor.agent.daemon import Daemon
from ascend_doctor.agent.fleet import HAGate, Member
from ascend_doctor.core.config import Config
from ascend_doctor.core.errors import ConfigError
from ascend_doctor.core.ha import server_dir
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.core.sdnotify import NOTIFY_VARS, Notifier
from ascend_doctor.rules import RuleSet


def _one_port_only(config: Config) -> None:
    """Listeners with one fixed address cannot run once per server yet."""
    taken = []
    if config.telemetry.prometheus:
        taken.append("telemetry.prometheus")
    if config.tracing.receiver or config.tracing.capture_server:
        taken.append("tracing.receiver / tracing.capture_server")
    if taken:
        raise ConfigError(
            f"config '{taken[0]}' is on, with [[servers]]: each server's doctor would listen "
            f"on the same address; turn off {' and '.join(taken)} with several servers"
        )


class Fleet:
    """The daemons of several servers and the gate between them."""

    def __init__(
        self,
        config: Config,
        state_dir: Path,
        rules: RuleSet,
        *,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        _one_port_only(config)
        env = dict(os.environ if base_env is None else base_env)
        self.gate = HAGate(config.ha)
        host = config.alerts.host or socket.gethostname()
        notifier = Notifier.from_environ(os.environ)  # READY and STOPPING once, for all
        self.daemons: list[Daemon] = []
        for entry in config.servers:
            spec = LaunchSpec(tuple(entry.command), dict(entry.env))
            url = entry.url or config.server.health_url or spec.health_base_url()
            clean = {k: v for k, v in env.items() if k not in NOTIFY_VARS}
            member = Member(entry.name, url, spec.devices(clean))
            self.gate.add(member)
            cfg = replace(
                config,
                server=replace(config.server, health_url=url),
                alerts=replace(config.alerts, host=f"{host}/{entry.name}"),
            )
            d = server_dir(state_dir, entry.name)
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.daemons.append(
                Daemon(
                    cfg,
                    d,
                    spec,
                    rules,
                    base_env=env,
                    member=member,
                    notifier=notifier if not self.daemons else Notifier(None, None),
                )
            )

    async def run(self) -> int:
        """Run every server's daemon until ``shutdown()``; non-zero when one gave up."""
        try:
            results = await asyncio.gather(*(d.run() for d in self.daemons))
        finally:
            await self.gate.close()
        return max(results, default=0)

    def shutdown(self) -> None:
        """Stop every server and return from ``run()``."""
        for d in self.daemons:
            d.shutdown()


__all__ = ["Fleet"]
