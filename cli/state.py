"""``ascend-doctor overrides`` and ``incidents ack``: the state, as an operator changes it."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.remediation.policy import acknowledge_incident
from ascend_doctor.cli.common import open_store, state_dir_option
from ascend_doctor.cli.views import plural
from ascend_doctor.core.config import IncidentsConfig


@click.group("overrides")
def overrides_group() -> None:
    """Launch changes learned by remediation (applied on every start)."""


@overrides_group.command("list")
@state_dir_option
def overrides_list(state_dir: Path | None) -> None:
    """Every stored override and the incident that caused it."""
    store = open_store(state_dir)
    try:
        rows = store.overrides()
    finally:
        store.close()
    if not rows:
        click.echo("no overrides")
    for o in rows:
        click.echo(f"{o.kind:4} {o.key} {o.value} (incident #{o.incident_id})")


@overrides_group.command("clear")
@state_dir_option
def overrides_clear(state_dir: Path | None) -> None:
    """Forget every override: the next start uses the command as given."""
    store = open_store(state_dir, write=True)
    try:
        n = store.clear_overrides()
    finally:
        store.close()
    click.echo(
        f"cleared {plural(n, 'override')}; the server's next start uses the command as given"
    )


@click.command("ack")
@click.argument("incident_id", type=int)
@state_dir_option
def ack(incident_id: int, state_dir: Path | None) -> None:
    """Acknowledge an incident (an operator has seen it)."""
    store = open_store(state_dir, write=True)
    try:
        try:
            inc = store.incident(incident_id)
        except KeyError:
            raise click.ClickException(f"no incident #{incident_id}") from None
        incidents = IncidentManager(store, IncidentsConfig())
        acknowledge_incident(incidents, inc.id, time.time)
    finally:
        store.close()
    click.echo(f"incident #{incident_id} acknowledged")


__all__ = ["ack", "overrides_group"]
