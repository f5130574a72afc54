"""The command line: the face of the house."""

from __future__ import annotations

import importlib
import json
import logging
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ascend_doctor.cli.common import (
    config_from,
    config_option,
    open_store,
    resolve_state_dir,
    server_dirs,
    server_option,
    setup_logging,
    state_dir_option,
    usable_state_dir,
)
from ascend_doctor.core.errors import DoctorError

if TYPE_CHECKING:
    from ascend_doctor.core.config import Config

log = logging.getLogger("ascend_doctor")


class LazyGroup(click.Group):
    """A group whose commands are imported when one is run (or the list is shown): a command
    loads what it uses and nothing else (``--version`` no telemetry, ``status`` no httpx)."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, str] = dict(lazy or {})
        """Command name -> ``module:attribute`` of the click command."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, attr = self.lazy[cmd_name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None and cmd_name in SHORT_HELP:  # a whole sentence in the list
            cmd.short_help = SHORT_HELP[cmd_name]
        return cmd


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from ascend_doctor import __version__

    click.echo(f"ascend-doctor, version {__version__}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
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
    if config.servers and (command or attach):
        where = "a command after --" if command else "--attach"
        raise click.UsageError(
            f"the config has [[servers]]: the doctor runs those; give no {where} as well"
        )
    if command and shutil.which(command[0]) is None:
        raise click.ClickException(f"command not found: {command[0]}")
    setup_logging(verbose)
    spec = LaunchSpec(tuple(command)) if command else None
    status = run_watch(
        config, usable_state_dir(resolve_state_dir(state_dir)), spec, attach=attached
    )
    sys.exit(status)


def _with_remediation(config: Config, **changes: Any) -> Config:
    import dataclasses

    return dataclasses.replace(
        config, remediation=dataclasses.replace(config.remediation, **changes)
    )


def run_watch(config: Config, state_dir: Path, spec: Any, *, attach: Any = None) -> int:
    """Run the daemon until SIGINT/SIGTERM; the server is stopped cleanly on the way out."""
    import asyncio

    from ascend_doctor.agent.daemon import Daemon
    from ascend_doctor.agent.fleet_run import Fleet
    from ascend_doctor.rules import load_rules

    daemon: Daemon | Fleet
    try:
        rules = load_rules([Path(d) for d in config.rules.dirs])
        if config.servers:
            daemon = Fleet(config, state_dir, rules)
        else:
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
    for d in daemon.daemons if isinstance(daemon, Fleet) else [daemon]:
        if d.supervisor is not None and d.supervisor.fatal_reason:
            who = f"server {d.member.name}" if d.member else "server"
            click.echo(f"ascend-doctor: {who} gave up: {d.supervisor.fatal_reason}", err=True)
    return status


@main.group(cls=LazyGroup, invoke_without_command=True)
@state_dir_option
@server_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per incident per line.")
@click.option("--utc", is_flag=True, help="Times in UTC instead of local time.")
@click.pass_context
def incidents(
    ctx: click.Context, state_dir: Path | None, server: str | None, as_json: bool, utc: bool
) -> None:
    """List incidents with their remediation decisions (or: incidents show ID, incidents ack ID).

    --state-dir, --server and --utc given here apply to the subcommand too.
    """
    if ctx.invoked_subcommand is not None:
        if as_json:
            raise click.UsageError(
                f"--json lists incidents; it does not go with {ctx.invoked_subcommand}"
            )
        if state_dir is None and server is None:
            return  # the subcommand's own --state-dir (or the default) is read there
        dirs = server_dirs(state_dir, server)
        if len(dirs) > 1:
            raise click.UsageError(
                f"this doctor runs several servers ({', '.join(n for n, _ in dirs)}): "
                f"give --server NAME before {ctx.invoked_subcommand}"
            )
        ctx.params["state_dir"] = dirs[0][1]  # the subcommand reads that server's store
        return
    dirs = server_dirs(state_dir, server)
    from ascend_doctor.cli.views import incident_dicts, when

    rows: list[dict[str, Any]] = []
    for name, d in dirs:
        ctx.params["state_dir"] = d
        store = open_store(d)
        rows += [{"server": name, **r} if name else r for r in incident_dicts(store)]
        store.close()
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, sort_keys=False))
        return
    if not rows:
        click.echo("no incidents")
    for row in rows:
        mark = " ACKED" if row["acknowledged"] else ""
        who = f"[{row['server']}] " if "server" in row else ""
        click.echo(
            f"{who}#{row['id']} {row['state']:10}{mark} {row['severity']:8} {row['category']:22}"
            f" {row['subject']:7} {row['summary']}"
            + (f" (x{row['findings']})" if row["findings"] > 1 else "")
        )
        closed = f", {row['state']} {when(row['resolved_at'], utc)}" if row["resolved_at"] else ""
        click.echo(f"      opened {when(row['opened_at'], utc)}{closed}")
        for a in row["actions"]:
            click.echo(f"      {a['name']:28} {a['outcome']:9} {a['reason']}")


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object.")
@click.option("--exit-code", is_flag=True, help="Exit with 1 when a failure is found.")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also read this state dir: its store's incidents and npu-smi samples, and the logs "
    "its doctor followed.",
)
@click.option(
    "--rules",
    "rule_dirs",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Site rules directory on top of the builtin packs (repeatable).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes for files of more than one chunk (4 MiB); default: every core.",
)
def diagnose(
    paths: tuple[Path, ...],
    as_json: bool,
    exit_code: bool,
    rule_dirs: tuple[Path, ...],
    jobs: int | None,
    state_dir: Path | None,
) -> None:
    """Offline root-cause analysis of log files (- for stdin), plog/slog trees, a bundle or
    a state dir (--state-dir).

    Exit status: 2 when a path named here cannot be read or is not text (the others are
    still read), 1 with --exit-code when a failure is found, else 0 (as ``rules scan``).
    """
    if not paths and state_dir is None:
        raise click.UsageError("give the logs, bundles or npu-smi outputs to read, or --state-dir")
    import gc

    from ascend_doctor.cli.diagnose import diagnose as run_diagnose
    from ascend_doctor.cli.diagnose import report
    from ascend_doctor.cli.parallel import default_jobs
    from ascend_doctor.rules import load_rules

    try:
        rules = load_rules(list(rule_dirs))
    except DoctorError as exc:
        raise click.ClickException(str(exc)) from None
    gc.freeze()  # the packs live as long as the scan: the collector need not walk them
    jobs = jobs or default_jobs()
    total = sum(_size(p) for p in paths)
    if sys.stderr.isatty() and not as_json:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("scanning", total=total or None)
            result = _run(
                lambda: run_diagnose(
                    list(paths),
                    rules,
                    progress=lambda n: bar.advance(task, n),
                    jobs=jobs,
                    state_dir=state_dir,
                )
            )
    else:
        result = _run(lambda: run_diagnose(list(paths), rules, jobs=jobs, state_dir=state_dir))
    rep = report(result, rules)
    named = {str(p) for p in paths}
    read = result.files_read > 0 or result.store_read
    unusable = not read or any(u["path"] in named for u in rep["unreadable"])
    if as_json:
        click.echo(json.dumps(rep, indent=2))
    else:
        _print_report(rep)
    if unusable:
        sys.exit(2)
    if exit_code and (rep["root_causes"] or rep["symptoms"]):
        sys.exit(1)


def _run(scan: Any) -> Any:
    """The scan; a state dir without a readable store is one line and exit 2."""
    try:
        return scan()
    except DoctorError as exc:
        click.echo(f"ascend-doctor: {exc}", err=True)
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
    from ascend_doctor.cli.diagnose_store import describe
    from ascend_doctor.cli.views import plural

    for u in rep["unreadable"]:  # first: a report on nothing must not read as all clear
        click.echo(f"unreadable: {u['path']}: {u['error']}", err=True)
    click.echo(
        f"read {plural(rep['files_read'], 'file')}, {plural(rep['lines_read'], 'line')}"
        if rep["lines_read"] < 1000
        else f"read {plural(rep['files_read'], 'file')}, {rep['lines_read']:,} lines"
    )
    if rep["files_read"] == 0 and not rep.get("store_read"):
        click.echo("nothing could be read: no diagnosis")
    elif not rep["root_causes"] and not rep["symptoms"] and not rep.get("stored_incidents"):
        click.echo("no known failure found")
    if rep["root_causes"]:
        click.echo("\nROOT CAUSES (the cause of the others first)")
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
    if rep.get("stored_incidents"):
        click.echo("\nINCIDENTS THE DOCTOR RECORDED (from its store)")
    for inc in rep.get("stored_incidents", []):
        seen = "" if inc["in_logs"] else "  (no root cause above: seen in samples or metrics)"
        click.echo(
            f"  #{inc['id']} {inc['state']} [{inc['category']}] {inc['subject']}:"
            f" {inc['summary']}{seen}"
        )
    if rep.get("stored_samples"):
        click.echo("\nDEVICES AS NPU-SMI LAST SHOWED THEM (from the doctor's samples)")
    for sample in rep.get("stored_samples", []):
        click.echo(f"  {sample['subject']}: {describe(sample)}")
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


def _register() -> None:
    """Every command beside those above, by module: imported only when it is used."""
    assert isinstance(main, LazyGroup) and isinstance(incidents, LazyGroup)
    main.lazy.update(
        {
            "rules": "ascend_doctor.cli.rules:rules_group",
            "findings": "ascend_doctor.cli.rules:findings",
            "check": "ascend_doctor.cli.check:check",
            "bundle": "ascend_doctor.cli.bundle:bundle",
            "profile": "ascend_doctor.cli.profile:profile",
            "status": "ascend_doctor.cli.status:status",
            "overrides": "ascend_doctor.cli.state:overrides_group",
            "alerts": "ascend_doctor.cli.alerts:alerts_group",
            "silence": "ascend_doctor.cli.alerts:silence_group",
            "traces": "ascend_doctor.cli.traces:traces_group",
            "tui": "ascend_doctor.cli.tui:tui",
            "demo": "ascend_doctor.cli.demo_cmd:demo",
        }
    )
    incidents.lazy.update(
        {
            "ack": "ascend_doctor.cli.state:ack",
            "show": "ascend_doctor.cli.traces:show",  # incidents show ID: the span waterfall
        }
    )


SHORT_HELP = {
    "watch": "Supervise a server (-- vllm serve ...): watch, diagnose, remediate.",
    "demo": "Run the doctor on a simulated Ascend host through fault scenarios.",
    "status": "Is the doctor running; the server; what waits for a human (exit 0/1/2/3).",
    "incidents": "List incidents and their decisions; incidents show ID, incidents ack ID.",
    "diagnose": "Offline root-cause analysis of logs, plog/slog trees or a bundle.",
    "bundle": "Pack incidents, findings, logs and npu-smi output for offline debugging.",
    "check": "Preflight: driver, CANN, torch_npu and vLLM versions, devices, ports.",
    "profile": "Capture and analyse a profile of the live server.",
    "traces": "Export the stored traces (OTLP JSON).",
    "tui": "A live view of devices, server, logs, incidents and traces.",
}
"""What the top-level help says of each command: a whole sentence, never cut mid-way."""


_register()

__all__ = ["main", "run_watch"]
