"""``ascend-doctor alerts test`` and ``ascend-doctor silence add|list|rm``."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import click
import httpx

from ascend_doctor.agent.alerts import Alert, Delivery, Kind, Sink, build_sinks
from ascend_doctor.cli.bundle import parse_since
from ascend_doctor.cli.common import open_store, state_dir_option
from ascend_doctor.core.config import load_config
from ascend_doctor.core.errors import ConfigError, DoctorError
from ascend_doctor.core.events import Category

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML config file with the [alerts] section.",
)


@click.group("alerts")
def alerts_group() -> None:
    """Alert sinks: test them."""


def test_alert(sink: Sink, host: str, kind: Kind) -> Alert:
    """A harmless alert that names itself a test."""
    now = time.time()
    return Alert(
        kind=kind.value,
        event="test",
        dedup_key=f"ascend-doctor:{host}:test:{sink.name}:{int(now)}",
        host=host,
        summary=f"ascend-doctor test alert from {host} to sink {sink.name}: nothing is wrong",
        severity="info",
        category="test",
        subject="server",
        device="",
        incident_id=None,
        state="resolved" if kind == Kind.RESOLVE else "open",
        rule="test",
        root_cause="a test sent by 'ascend-doctor alerts test'",
        explain="Sent on request to check that this sink delivers; no action needed.",
        opened_at=now,
        resolved_at=now if kind == Kind.RESOLVE else None,
        at=now,
    )


async def send_tests(host: str, sinks: list[Sink]) -> list[tuple[Sink, Delivery]]:
    """Send a test alert to each sink (resolved right after where the sink keeps state)."""
    out = []
    async with httpx.AsyncClient() as client:
        for sink in sinks:
            trigger = test_alert(sink, host, Kind.TRIGGER)
            result = await sink.send(trigger, client)
            if result.ok and sink.stateful:
                resolve = Alert.from_json(
                    {**trigger.to_json(), "kind": Kind.RESOLVE.value, "resolved_at": time.time()}
                )
                result = await sink.send(resolve, client)
            out.append((sink, result))
    return out


@alerts_group.command("test")
@config_option
@click.option("--sink", "sink_name", default=None, help="Only this sink (by name).")
def alerts_test(config_path: Path | None, sink_name: str | None) -> None:
    """Send a test alert to each configured sink and report what each said."""
    try:
        config = load_config(config_path)
        configured = build_sinks(config.alerts, os.environ)
    except DoctorError as exc:
        raise click.ClickException(str(exc)) from None
    sinks = configured
    if sink_name is not None:
        sinks = [s for s in configured if s.name == sink_name]
        if not sinks:
            known = ", ".join(s.name for s in configured) or "none configured"
            raise click.ClickException(f"no sink named {sink_name!r}; sinks: {known}")
    if not sinks:
        raise click.ClickException("no alert sinks configured ([[alerts.sinks]])")
    host = config.alerts.host or socket.gethostname()
    results = asyncio.run(send_tests(host, sinks))
    failed = 0
    for sink, result in results:
        if result.ok:
            click.echo(f"{sink.name} ({sink.type}): ok {result.response}".rstrip())
        else:
            failed += 1
            extra = f" ({result.response})" if result.response else ""
            click.echo(f"{sink.name} ({sink.type}): FAILED {result.error}{extra}")
    if failed:
        sys.exit(1)


@click.group("silence")
def silence_group() -> None:
    """Hold back alerts of a category (and subject) for a while."""


@silence_group.command("add")
@click.option("--category", required=True, help="Failure category, e.g. npu_oom.")
@click.option("--subject", default="", help="Only this subject (npu3, server).")
@click.option("--for", "duration", required=True, help="How long: 30m, 2h, 1d.")
@click.option("--comment", default="", help="Why, for whoever reads 'silence list'.")
@state_dir_option
def silence_add(
    category: str, subject: str, duration: str, comment: str, state_dir: Path | None
) -> None:
    """Silence alerts of CATEGORY for a while (resolves of alerts already sent still go)."""
    known = [c.value for c in Category]
    if category not in known:
        raise click.BadParameter(
            f"{category!r}: expected one of {', '.join(known)}", param_hint="--category"
        )
    try:
        seconds = parse_since(duration)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--for") from None
    store = open_store(state_dir, write=True)
    try:
        until = time.time() + seconds
        silence_id = store.add_silence(category, subject, until, comment)
    finally:
        store.close()
    click.echo(
        f"silence {silence_id}: {category}{' ' + subject if subject else ''} until {_at(until)}"
    )


@silence_group.command("list")
@click.option("--all", "show_all", is_flag=True, help="Also silences that have ended.")
@state_dir_option
def silence_list(show_all: bool, state_dir: Path | None) -> None:
    """The running silences."""
    store = open_store(state_dir)
    try:
        rows = store.silences(active_at=None if show_all else time.time())
    finally:
        store.close()
    if not rows:
        click.echo("no silences")
    for s in rows:
        what = (s.category or "*") + (f" {s.subject}" if s.subject else "")
        note = f"  {s.comment}" if s.comment else ""
        click.echo(f"{s.id:4} {what:30} until {_at(s.until)}{note}")


@silence_group.command("rm")
@click.argument("silence_id", type=int)
@state_dir_option
def silence_rm(silence_id: int, state_dir: Path | None) -> None:
    """End silence SILENCE_ID now."""
    store = open_store(state_dir, write=True)
    try:
        removed = store.remove_silence(silence_id)
    finally:
        store.close()
    if not removed:
        raise click.ClickException(f"no silence {silence_id}")
    click.echo(f"silence {silence_id} removed")


def _at(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


__all__ = ["alerts_group", "send_tests", "silence_group", "test_alert"]
