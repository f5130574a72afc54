"""``ascend-doctor status``, ``overrides`` and ``incidents ack``: the state, as an operator asks."""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.remediation.policy import Policy, acknowledge_incident
from ascend_doctor.cli.common import open_store, state_dir_option
from ascend_doctor.core.config import IncidentsConfig, RemediationConfig
from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.events import ACTIVE_STATES
from ascend_doctor.core.incident_stats import category_stats
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.core.records import LaunchRecord, encode
from ascend_doctor.core.store import Store


def _span(seconds: float) -> str:
    """``42s``, ``12.5 min``, ``3.2 h``: a duration as an operator reads it."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def status_dict(store: Store) -> dict[str, Any]:
    """What ``status --json`` prints."""
    launch = store.launch() or LaunchRecord(())
    overrides = store.overrides()
    effective = LaunchSpec(launch.argv, dict(launch.env)).apply(overrides)
    open_incidents = store.incidents(states=ACTIVE_STATES)
    doctor = store.doctor()
    server = store.server()
    remediation = doctor.remediation if doctor is not None else RemediationConfig()
    return {
        "server": encode(server) if server is not None else None,
        "doctor": encode(doctor) if doctor is not None else {},
        "remediation": Policy(store, remediation, time.time).remaining(),
        "launch": {"argv": list(effective.argv), "env": dict(effective.env)},
        "overrides": [
            {"key": o.key, "kind": o.kind, "value": o.value, "incident": o.incident_id, "at": o.at}
            for o in overrides
        ],
        "open_incidents": [
            {
                "id": i.id,
                "category": i.category.value,
                "state": i.state.value,
                "attempts": i.attempts,
                "summary": i.summary,
            }
            for i in open_incidents
        ],
        "collectors": {name: encode(c) for name, c in store.collectors().items()},
        "reliability": {k: asdict(v) for k, v in category_stats(store.incidents()).items()},
        "alerts": {name: encode(s) for name, s in store.sinks().items()},
    }


@click.command("status")
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="The same as one JSON object.")
def status(state_dir: Path | None, as_json: bool) -> None:
    """Server state, the effective launch command with each learned override, open incidents."""
    store = open_store(state_dir)
    try:
        data = status_dict(store)
    except DoctorError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    server = data["server"] or {}
    doctor = data["doctor"] or {}
    click.echo(
        f"server: {server.get('state', 'unknown')}"
        + (f" (pid {server['pid']})" if server.get("pid") else "")
        + (f": {server['reason']}" if server.get("reason") else "")
    )
    click.echo(f"remediation mode: {doctor.get('mode', 'unknown')}")
    rem = data["remediation"]
    if "error" in rem:
        click.echo(f"remediation budget: unreadable, failing closed: {rem['error']}")
    else:
        click.echo(
            f"remediation budget: {rem['budget_left']} of {rem['budget_per_hour']} steps left"
            " this hour"
            + (
                f"; breaker tripped for {', '.join(rem['breakers_tripped'])}"
                if rem["breakers_tripped"]
                else ""
            )
            + "".join(f"; {a} cooling down {s}s" for a, s in rem["cooling_down_s"].items())
        )
    if data["launch"]["argv"]:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in data["launch"]["env"].items())
        click.echo("launch: " + (env + " " if env else "") + shlex.join(data["launch"]["argv"]))
    for o in data["overrides"]:
        shown = o["key"] if o["kind"] == "flag" else f"{o['key']}={o['value']}"
        click.echo(f"  override {shown} (learned from incident #{o['incident']})")
    for i in data["open_incidents"]:
        click.echo(
            f"open incident #{i['id']} {i['state']} {i['category']}: {i['summary']}"
            f" ({i['attempts']} attempts)"
        )
    for category, r in data["reliability"].items():
        click.echo(
            f"{category}: {r['incidents']} incidents, {r['resolved']} repaired"
            + (f", MTTR {_span(r['mttr_s'])}" if r["mttr_s"] is not None else "")
            + (f", one every {_span(r['mtbi_s'])}" if r["mtbi_s"] is not None else "")
        )
    for name, c in data["collectors"].items():
        ok = "ok" if c.get("ok") else f"failing: {c.get('last_error')}"
        click.echo(
            f"collector {name}: {c.get('runs', 0)} runs, {c.get('failures', 0)} failures, {ok}"
        )
    for name, a in data["alerts"].items():
        last = f", last error: {a['last_error']}" if a.get("last_error") else ""
        click.echo(
            f"alert sink {name} ({a.get('type')}): {a.get('sent', 0)} sent,"
            f" {a.get('queued', 0)} queued, {a.get('failed', 0)} rejected,"
            f" {a.get('failures', 0)} failed attempts{last}"
        )


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
    click.echo(f"cleared {n} overrides; they apply from the server's next start")


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


__all__ = ["ack", "overrides_group", "status", "status_dict"]
