"""``ascend-doctor demo --two-instances``: the deployment guide's production layout on the
simulated host. A real nginx (when installed) balances two simulated vLLM-Ascend instances,
each on its own card, under one doctor; steady client traffic goes through nginx while a
card fails under the first instance. The doctor resets that card and restarts that instance
only; the second serves every request meanwhile; the tour counts the requests that failed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from ascend_doctor.agent.fleet_run import Fleet
from ascend_doctor.cli.balancer import Balancer, Load, nginx_binary
from ascend_doctor.cli.common import setup_logging, usable_state_dir
from ascend_doctor.cli.demo import _sim_paths, demo_config, free_port
from ascend_doctor.core.config import Config
from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.events import IncidentState, ProcessState
from ascend_doctor.core.ha import HAConfig, ServerEntry, server_dir
from ascend_doctor.core.store import Store
from ascend_doctor.rules import load_rules
from ascend_doctor.sim.host import SimHost

T = TypeVar("T")
MODEL = "Qwen/Qwen2.5-7B-Instruct"
DEADLINE = 90.0
NO_NGINX = (
    "the two-instance tour needs nginx (Debian/Ubuntu: apt-get install nginx); it was not "
    "found on PATH nor in /usr/sbin, so the tour did not run"
)


def run_pair(state_dir: Path | None, config: Config | None, *, verbose: bool = False) -> bool:
    """The tour; True when the fault was fixed on its instance with no failed request."""
    binary = nginx_binary()
    if binary is None:
        click.echo(f"ascend-doctor demo: {NO_NGINX}", err=True)
        return False
    root = Path(tempfile.mkdtemp(prefix="ascend-doctor-pair-"))
    state = usable_state_dir(state_dir or root / "state")
    setup_logging(verbose, None if verbose else state / "doctor.log")
    host = SimHost.create(root / "host", load_seconds=0.5)
    host.set_setting("reset_scope", "chip")  # HCCS off: a reset takes one chip, not the board
    ports = {"a": free_port(), "b": free_port()}
    lb = Balancer(root / "nginx", free_port(), binary)
    lb.start([(n, f"127.0.0.1:{p}") for n, p in ports.items()])
    try:
        return asyncio.run(_tour(_config(config, host, lb, ports), state, host, lb))
    finally:
        lb.stop()


def _config(config: Config | None, host: SimHost, lb: Balancer, ports: dict[str, int]) -> Config:
    base = _sim_paths(config or demo_config(), host)
    servers = tuple(
        ServerEntry(
            name,
            tuple(host.serve_argv(MODEL, ["--host", "127.0.0.1", "--port", str(port)])),
            {"ASCEND_RT_VISIBLE_DEVICES": str(device)},
        )
        for device, (name, port) in enumerate(ports.items())
    )
    return dataclasses.replace(
        base,
        servers=servers,
        ha=HAConfig(
            drain_command=tuple(lb.drain_argv("down")),
            undrain_command=tuple(lb.drain_argv("up")),
            drain_wait=0.5,
        ),
        remediation=dataclasses.replace(base.remediation, reset_scope="chip"),
        # one profile capture per planned restart would slow the tour; nothing here needs it
        profiling=dataclasses.replace(base.profiling, enabled=False),
    )


def _read(state: Path, name: str, fn: Callable[[Store], T]) -> T | None:
    try:
        store = Store.in_dir(server_dir(state, name), readonly=True)
    except DoctorError:  # not created yet
        return None
    try:
        return fn(store)
    finally:
        store.close()


def _running(state: Path, name: str) -> bool:
    s = _read(state, name, lambda st: st.server())
    return s is not None and s.state == ProcessState.RUNNING


def _fixed(state: Path) -> bool:
    def find(st: Store) -> bool:
        return any(
            i.category.value == "device_fault" and i.state == IncidentState.RESOLVED
            for i in st.incidents()
        )

    return bool(_read(state, "a", find))


async def _until(cond: Callable[[], bool], what: str) -> bool:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.2)
    click.echo(f"   no {what} within {DEADLINE:.0f}s")
    return False


async def _tour(config: Config, state: Path, host: SimHost, lb: Balancer) -> bool:
    click.echo("== two instances behind nginx: a card fails under one of them ==")
    click.echo(f"   nginx on {lb.url}; server a on card 0, server b on card 1; state in {state}")
    fleet = Fleet(
        config,
        state,
        load_rules([Path(d) for d in config.rules.dirs]),
        base_env={**os.environ, **host.env()},
    )
    run = asyncio.create_task(fleet.run())
    load = Load(lb.url, MODEL)
    ok = False
    try:
        if not await _until(lambda: _running(state, "a") and _running(state, "b"), "start"):
            return False
        load.start()
        await _until(lambda: load.ok >= 30, "traffic")
        click.echo(f"   {load.ok} requests answered through nginx; card 0 loses its heartbeat")
        host.inject(0, "heartbeat_lost")
        fixed = await _until(lambda: _fixed(state), "fix of server a")
        seen = load.sent
        await _until(lambda: load.sent >= seen + 30, "traffic after the fix")
        load.stop()
        b_stops = _read(
            state,
            "b",
            lambda st: [e for e in st.process_events(limit=500) if e.state.value == "STOPPING"],
        )
        click.echo(f"   server a: {'fixed (card 0 reset, a restarted)' if fixed else 'NOT fixed'}")
        click.echo(f"   server b: {'never stopped' if not b_stops else 'STOPPED'}")
        again = (
            f" ({load.retried} sent again: nginx's reload closed an idle kept-alive connection)"
            if load.retried
            else ""
        )
        click.echo(
            f"   client requests through nginx: {load.ok} answered, {load.failed} failed{again}"
        )
        for why in load.failures[:5]:
            click.echo(f"     failed: {why}")
        click.echo(f"   the decisions: ascend-doctor incidents --state-dir {state}\n")
        ok = fixed and not b_stops and load.failed == 0
    finally:
        load.stop()
        fleet.shutdown()
        await run
    return ok


__all__ = ["NO_NGINX", "run_pair"]
