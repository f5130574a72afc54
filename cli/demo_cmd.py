"""``ascend-doctor demo``'s options: the scenario tour, the TUI beside it, or the two-instance
tour (its own module from cli/main.py, which is the house's size limit's). What it runs is
``cli/demo.py`` and ``cli/demo_pair.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ascend_doctor.cli.common import config_from, config_option, state_dir_option
from ascend_doctor.core.errors import DoctorError


@click.command("demo")
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
@click.option(
    "--two-instances",
    is_flag=True,
    help="Two instances behind a real nginx (needs nginx): a card fails under one of them.",
)
def demo(
    scenarios: tuple[str, ...],
    list_only: bool,
    state_dir: Path | None,
    config_path: Path | None,
    verbose: bool,
    with_tui: bool,
    sim_version: str | None,
    two_instances: bool,
) -> None:
    """Run the doctor on a simulated Ascend host through fault scenarios."""
    from ascend_doctor.cli import demo as demo_mod

    if two_instances:
        if scenarios or with_tui or sim_version:
            raise click.UsageError("--two-instances is a tour of its own: no other options")
        from ascend_doctor.cli.demo_pair import run_pair

        config = config_from(config_path) if config_path else None
        sys.exit(0 if run_pair(state_dir, config, verbose=verbose) else 1)

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
    except demo_mod.DemoInterrupted:
        sys.exit(130)  # as a shell reports a command Ctrl-C stopped
    sys.exit(0 if ok else 1)


__all__ = ["demo"]
