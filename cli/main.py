"""The command line: the face of the house."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import click

from ascend_doctor import __version__
from ascend_doctor.cli.common import (
    config_from,
    config_option,
    open_store,
    resolve_state_dir,
    setup_logging,
    state_dir_option,
)
from ascend_doctor.cli.views import incident_dicts
from ascend_doctor.core.config import Config
from ascend_doctor.core.errors import DoctorError

log = logging.getLogger("ascend_doctor")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ascend-doctor")
def main() -> None:
    """Diagnose and remediate vLLM-Ascend servers on Huawei Ascend NPUs."""


@main.command(context_settings={"ignore_unknown_options": True})
@config_option
@state_dir_option
@click.option("--dry-run", is_flag=True, help="Log what remediation would do; change nothing.")
@click.option("--log", "logs", multiple=True, help="Also follow this file or glob (repeatable).")
@click.option(
    "--attach",
    is_flag=True,
    help="Watch a server something else runs (systemd, Kubernetes) at --url instead of COMMAND.",
)
@click.option("--url", default=None, help="With --attach: the server's base URL.")
@click.option("--pid", type=int, default=None, help="With --attach: the server's main PID.")
@click.option(
    "--restart-command",
    default=None,
    help='With --attach: how to restart the server, e.g. "systemctl restart vllm" '
    "(split like a shell would, run without one).",
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def watch(
    config_path: Path | None,
    state_dir: Path | None,
    dry_run: bool,
    logs: tuple[str, ...],
    attach: bool,
    url: str | None,
    pid: int | None,
    restart_command: str | None,
    verbose: bool,
    command: tuple[str, ...],
) -> None:
    """Supervise COMMAND (e.g. -- vllm serve MODEL ...): watch, diagnose, remediate.

    Without COMMAND only the observers run (logs, collectors, rules, incidents). With
    --attach the server at --url is watched the same way; restarts go through
    --restart-command and launch changes are suggested with the exact flag.
    """
    import dataclasses

    from ascend_doctor.agent.attach import AttachSpec
    from ascend_doctor.core.launch import LaunchSpec

    attached = None
    if attach:
        if command:
            raise click.UsageError("--attach watches a running server: give --url, not COMMAND")
        if not url:
            raise click.UsageError("--attach needs --url (e.g. --url http://127.0.0.1:8000)")
        try:
            attached = AttachSpec.parse(url, pid, restart_command)
        except DoctorError as exc:
            raise click.UsageError(str(exc)) from None
    elif url or pid is not None or restart_command:
        raise click.UsageError("--url, --pid and --restart-command go with --attach")
    config = config_from(config_path)
    if dry_run:
        config = _with_remediation(config, dry_run=True)
    if logs:
        config = dataclasses.replace(
            config, logs=dataclasses.replace(config.logs, paths=(*config.logs.paths, *logs))
        )
    if command and shutil.which(command[0]) is None:
        raise click.ClickException(f"command not found: {command[0]}")
    setup_logging(verbose)
    spec = LaunchSpec(tuple(command)) if command else None
    status = run_watch(config, resolve_state_dir(state_dir), spec, attach=attached)
    sys.exit(status)


def _with_remediation(config: Config, **changes: Any) -> Config:
    import dataclasses

    return dataclasses.replace(
        config, remediation=dataclasses.replace(config.remediation, **changes)
    )


def run_watch(config: Config, state_dir: Path, spec: Any, *, attach: Any = None) -> int:
    """Run the daemon until SIGINT/SIGTERM; the server is stopped cleanly on the way out."""
    from ascend_doctor.agent.daemon import Daemon
    from ascend_doctor.rules import load_rules

    try:
        rules = load_rules([Path(d) for d in config.rules.dirs])
        daemon = Daemon(config, state_dir, spec, rules, attach=attach)
    except DoctorError as exc:
        raise click.ClickException(str(exc)) from None

    async def go() -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, daemon.shutdown)
        return await daemon.run()

    click.echo(f"ascend-doctor: state dir {state_dir}", err=True)
    status = asyncio.run(go())
    if daemon.supervisor is not None and daemon.supervisor.fatal_reason:
        click.echo(f"ascend-doctor: server gave up: {daemon.supervisor.fatal_reason}", err=True)
    return status


@main.command()
@click.option("--scenario", "scenarios", multiple=True, help="Run only this scenario (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="Name the scenarios and exit.")
@state_dir_option
@config_option
@click.option("-v", "--verbose", is_flag=True, help="Doctor logs on stderr instead of a file.")
@click.option("--tui", "with_tui", is_flag=True, help="Watch it happen in the TUI.")
@click.option(
    "--sim-version",
    default=None,
    help="vLLM / vLLM-Ascend release line the simulated host runs (0.11, 0.13, 0.18, 0.23).",
)
def demo(
    scenarios: tuple[str, ...],
    list_only: bool,
    state_dir: Path | None,
    config_path: Path | None,
    verbose: bool,
    with_tui: bool,
    sim_version: str | None,
) -> None:
    """Run the doctor on a simulated Ascend host through fault scenarios."""
    from ascend_doctor.cli import demo as demo_mod

    if list_only:
        for name, description in demo_mod.scenario_list():
            click.echo(f"{name:14} {description}")
        return
    if with_tui:  # the demo runs as a child process; the TUI reads its state dir
        from ascend_doctor.cli.tui import demo_with_tui

        sys.exit(demo_with_tui(scenarios, state_dir))
    config = config_from(config_path) if config_path else None
    try:
        ok = demo_mod.run_demo(
            list(scenarios), state_dir, config, verbose=verbose, sim_version=sim_version
        )
    except DoctorError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(0 if ok else 1)


@main.group(invoke_without_command=True)
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per incident per line.")
@click.pass_context
def incidents(ctx: click.Context, state_dir: Path | None, as_json: bool) -> None:
    """List incidents with their remediation decisions (or: incidents ack ID)."""
    if ctx.invoked_subcommand is not None:
        return
    store = open_store(state_dir)
    rows = incident_dicts(store)
    store.close()
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, sort_keys=False))
        return
    if not rows:
        click.echo("no incidents")
    for row in rows:
        click.echo(
            f"#{row['id']} {row['state']:10} {row['severity']:8} {row['category']:22}"
            f" {row['subject']:7} {row['summary']}"
        )
        for a in row["actions"]:
            click.echo(f"      {a['name']:28} {a['outcome']:9} {a['reason']}")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object.")
@click.option(
    "--rules",
    "rule_dirs",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Site rules directory on top of the builtin packs (repeatable).",
)
def diagnose(paths: tuple[Path, ...], as_json: bool, rule_dirs: tuple[Path, ...]) -> None:
    """Offline root-cause analysis of log files, plog/slog trees or a support bundle."""
    from ascend_doctor.cli.diagnose import diagnose as run_diagnose
    from ascend_doctor.cli.diagnose import report
    from ascend_doctor.rules import load_rules

    try:
        rules = load_rules(list(rule_dirs))
    except DoctorError as exc:
        raise click.ClickException(str(exc)) from None
    total = sum(_size(p) for p in paths)
    if sys.stderr.isatty() and not as_json:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("scanning", total=total or None)
            result = run_diagnose(list(paths), rules, progress=lambda n: bar.advance(task, n))
    else:
        result = run_diagnose(list(paths), rules)
    rep = report(result, rules)
    if as_json:
        click.echo(json.dumps(rep, indent=2))
    else:
        _print_report(rep)
    if result.files_read == 0:
        sys.exit(2)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            continue
    return total


def _print_report(rep: dict[str, Any]) -> None:
    click.echo(f"read {rep['files_read']} files, {rep['lines_read']:,} lines")
    if not rep["root_causes"] and not rep["symptoms"]:
        click.echo("no known failure found")
    if rep["root_causes"]:
        click.echo("\nROOT CAUSES (earliest first)")
    for n, cause in enumerate(rep["root_causes"], 1):
        times = f" x{cause['count']}" if cause["count"] > 1 else ""
        click.echo(f"{n:2}. [{cause['category']}] {cause['summary']}{times}")
        click.echo(f"    rule {cause['rule']} ({cause['severity']}), subject {cause['subject']}")
        for e in cause["evidence"][:8]:
            click.echo(f"    {e['path']}:{e['line']}: {e['text'][:200]}")
        if cause["explain"]:
            click.echo(f"    why: {cause['explain']}")
        for s in cause["suggestions"]:
            click.echo(f"    do: {s}")
    if rep["symptoms"]:
        click.echo("\nSYMPTOMS (consequences of the above)")
    for sym in rep["symptoms"]:
        e = sym["evidence"][0] if sym["evidence"] else {"path": "", "line": 0}
        click.echo(
            f"  [{sym['category']}] {sym['summary']} x{sym['count']}"
            f"  ({sym['rule']}, first at {e['path']}:{e['line']})"
        )
    if rep["timeline"]:
        click.echo("\nTIMELINE")
    for t in rep["timeline"][:200]:
        click.echo(f"  {t['at'] or '?':26} {t['role']:7} {t['rule']:36} {t['path']}:{t['line']}")
    if rep.get("profiles"):
        click.echo("\nPROFILES (captured by the doctor, newest last)")
    for prof in rep.get("profiles", []):
        click.echo(f"  {prof['kind']} {prof['path']}: {prof['headline']}")
    if rep.get("profiles") and rep["profiles"][-1]["report"]:
        click.echo("\n" + rep["profiles"][-1]["report"].rstrip())
    if rep.get("evidence"):
        click.echo("\nEVIDENCE (kept before restarts, oldest first)")
    for ev in rep.get("evidence", []):
        stacks = sum(1 for f in ev["files"] if f.startswith("stacks-"))
        said = f": {ev['reason']}" if ev["reason"] else ""
        click.echo(f"  {ev['snapshot']}{said} ({len(ev['files'])} files, {stacks} stacks)")
    for u in rep["unreadable"]:
        click.echo(f"unreadable: {u['path']}: {u['error']}", err=True)


def _register() -> None:
    from ascend_doctor.cli.alerts import alerts_group, silence_group
    from ascend_doctor.cli.bundle import bundle
    from ascend_doctor.cli.check import check
    from ascend_doctor.cli.profile import profile
    from ascend_doctor.cli.rules import findings, rules_group
    from ascend_doctor.cli.state import ack, overrides_group, status
    from ascend_doctor.cli.traces import show, traces_group
    from ascend_doctor.cli.tui import tui

    main.add_command(rules_group)
    main.add_command(findings)
    main.add_command(check)
    main.add_command(bundle)
    main.add_command(profile)
    main.add_command(status)
    main.add_command(overrides_group)
    incidents.add_command(ack)
    main.add_command(alerts_group)
    main.add_command(silence_group)
    incidents.add_command(show)  # incidents show ID: the span waterfall (issue 7)
    main.add_command(traces_group)
    main.add_command(tui)


_register()

__all__ = ["main", "run_watch"]
