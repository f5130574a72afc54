"""What every command shares: logging set-up, the common options, the config and the store
as a command opens them (a bad file or a missing store is one line, never a traceback)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.redact import RedactingFilter

if TYPE_CHECKING:  # the config and the store are imported by the commands that use them
    from ascend_doctor.core.config import Config
    from ascend_doctor.core.store import Store


def setup_logging(verbose: bool, logfile: Path | None = None) -> None:
    """Doctor logs to stderr (or a file), one line each."""
    handler: logging.Handler = (
        logging.FileHandler(logfile) if logfile else logging.StreamHandler(sys.stderr)
    )
    from ascend_doctor.agent.telemetry.logctx import TraceContextFilter

    handler.addFilter(TraceContextFilter())  # trace_id/span_id inside a span (issue 7)
    handler.addFilter(RedactingFilter())  # no secret in the doctor's own log (issue 15)
    handler.setFormatter(
        logging.Formatter(
            "%(asctime)s ascend-doctor %(levelname)s %(name)s:%(trace_ctx)s %(message)s"
        )
    )
    root = logging.getLogger("ascend_doctor")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False
    # the file watcher's own messages (a stop racing its thread) go where ours go
    wd = logging.getLogger("watchdog")
    wd.handlers[:] = [handler]
    wd.setLevel(logging.WARNING)
    wd.propagate = False


def config_from(path: Path | None) -> Config:
    """The config at ``path`` (defaults when None); a bad file is a one-line error."""
    from ascend_doctor.core.config_file import load_config

    try:
        return load_config(path)
    except DoctorError as exc:
        raise click.ClickException(str(exc)) from None


class InputError(click.ClickException):
    """Input a command cannot use (no store, a missing or unreadable file): exit status 2,
    the same for every command, so a script tells it from a failure found (1)."""

    exit_code = 2


def group_option(name: str, value: object) -> object:
    """``value`` of an option, or the one given to an enclosing group (``incidents
    --state-dir S show 2``); the two given and different is a usage error."""
    ctx = click.get_current_context(silent=True)
    parent = ctx.parent if ctx is not None else None
    while parent is not None:
        given = parent.params.get(name)
        if given is not None:
            if value is not None and value != given:
                flag = "--" + name.replace("_", "-")
                raise click.UsageError(f"{flag} given twice: {given} and {value}")
            return given
        parent = parent.parent
    return value


def resolve_state_dir(value: Path | None) -> Path:
    """The state dir given (here or on the enclosing group), else the default one, absolute
    so that what the doctor prints can be pasted from any directory."""
    from ascend_doctor.core.config_file import default_state_dir

    given = group_option("state_dir", value)
    chosen = given if isinstance(given, Path) else default_state_dir()
    return chosen.absolute()


state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the store and the server log live (default: $XDG_STATE_HOME/ascend-doctor, "
    "or /var/lib/ascend-doctor as root).",
)
config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML config file (every key has a default).",
)


def usable_state_dir(d: Path) -> Path:
    """``d`` made and checked writable, absolute; one line (exit 2) when it cannot be: a path
    through a file, a read-only disk, no permission."""
    d = d.absolute()
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"{d}: cannot use as the state dir: {exc.strerror or exc}") from None
    return d


server_option = click.option(
    "--server",
    default=None,
    help="With several [[servers]]: only this one (default: every one).",
)


def server_dirs(state_dir: Path | None, server: str | None) -> list[tuple[str, Path]]:
    """(name, state dir) of each server a command reads: every ``[[servers]]`` name of a
    doctor of several (or the one asked for), else ("", the state dir)."""
    from ascend_doctor.core.ha import server_dir, server_names

    d = resolve_state_dir(state_dir)
    names = server_names(d)
    if server is not None:
        if server not in names:
            known = f"servers: {', '.join(names)}" if names else "it runs one server"
            raise InputError(f"{d}: no server {server!r} under this doctor ({known})")
        return [(server, server_dir(d, server))]
    return [(n, server_dir(d, n)) for n in names] or [("", d)]


def open_store(state_dir: Path | None, *, write: bool = False) -> Store:
    """The store of a state dir for a CLI command; a one-line error when there is none."""
    from ascend_doctor.core.store import STORE_NAME, Store

    d = resolve_state_dir(state_dir)
    if not (d / STORE_NAME).exists():
        raise InputError(f"{d / STORE_NAME}: no store here (has the doctor run?)")
    try:
        return Store.in_dir(d, readonly=not write)
    except DoctorError as exc:
        raise InputError(str(exc)) from None


__all__ = [
    "InputError",
    "config_from",
    "config_option",
    "group_option",
    "open_store",
    "resolve_state_dir",
    "server_dirs",
    "server_option",
    "setup_logging",
    "state_dir_option",
    "usable_state_dir",
]
