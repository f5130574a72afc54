"""``ascend-doctor tui`` and ``demo --tui``. Textual is imported only when the TUI runs, so the
daemon and every other command never load it."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ascend_doctor.cli.common import (
    InputError,
    resolve_state_dir,
    server_dirs,
    server_option,
    state_dir_option,
)
from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.store import STORE_NAME, Store

if TYPE_CHECKING:
    from ascend_doctor.tui.data import Source


@click.command("tui")
@state_dir_option
@server_option
@click.option(
    "--store",
    "store_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read this store file instead (a copy taken post-mortem; its logs are looked for "
    "beside it), or the store inside a support bundle (ascend-doctor bundle's .tar.gz).",
)
def tui(state_dir: Path | None, server: str | None, store_file: Path | None) -> None:
    """A live view of devices, server, logs, incidents and traces (read from the store); with
    several [[servers]], one at a time (s: the next one)."""
    from ascend_doctor.tui.data import Source

    if state_dir is not None and store_file is not None:
        raise click.UsageError("give --state-dir or --store, not both")
    if store_file is not None:
        if not store_file.is_file():
            raise InputError(f"{store_file}: no such store file")
        from ascend_doctor.cli.bundle_store import is_bundle, store_from_bundle

        if is_bundle(store_file):  # a support bundle: its store is rebuilt in a temp dir
            work = Path(tempfile.mkdtemp(prefix="ascend-doctor-bundle-"))
            try:
                try:
                    db = store_from_bundle(store_file, work)
                except (DoctorError, OSError, ValueError, KeyError, tarfile.TarError) as exc:
                    raise click.ClickException(
                        f"{store_file}: cannot read the bundle: {exc}"
                    ) from None
                _run_tui(Source(db, work))
            finally:
                shutil.rmtree(work, ignore_errors=True)
            return
        _check_store(store_file)
        source = Source(store_file)
    else:
        d = resolve_state_dir(state_dir)
        dirs = server_dirs(d, server)
        if dirs[0][0]:  # several [[servers]]: one at a time, s shows the next
            source = Source(dirs[0][1] / STORE_NAME, dirs[0][1], dirs if server is None else ())
            source.server = dirs[0][0]
        elif not (d / STORE_NAME).exists():
            raise InputError(f"{d / STORE_NAME}: no store here (has the doctor run?)")
        else:
            source = Source.for_state_dir(d)
    _run_tui(source)


def _check_store(path: Path) -> None:
    """A file that is not a doctor's store is one line here, not an empty TUI."""
    try:
        store = Store(path, readonly=True)
        try:
            store.incidents(newest=1)
        finally:
            store.close()
    except (DoctorError, sqlite3.Error) as exc:
        reason = str(exc).removeprefix(f"{path}: ")  # the store's errors name the file too
        raise InputError(f"{path}: not an ascend-doctor store: {reason}") from None


def _run_tui(source: Source) -> None:
    from ascend_doctor.tui.app import run  # Textual is loaded here, and only here

    run(source)


def demo_with_tui(scenarios: tuple[str, ...], state_dir: Path | None) -> int:
    """Run the demo in a child process and the TUI on its state dir here; quitting the TUI
    stops a demo that is still running. Returns the demo's exit status."""
    from ascend_doctor.tui.data import Source

    state = state_dir or Path(tempfile.mkdtemp(prefix="ascend-doctor-demo-")) / "state"
    state.mkdir(parents=True, exist_ok=True)
    out_path = state / "demo.out"
    argv = [sys.executable, "-m", "ascend_doctor", "demo", "--state-dir", str(state)]
    for name in scenarios:
        argv += ["--scenario", name]
    with open(out_path, "wb") as out:
        child = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        _run_tui(Source.for_state_dir(state))
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    click.echo(out_path.read_text(errors="replace"))
    click.echo(f"state dir: {state}")
    return child.returncode if child.returncode is not None else 1


__all__ = ["demo_with_tui", "tui"]
