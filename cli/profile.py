"""``ascend-doctor profile``: capture a profile of the live server and record it (the
capture itself is ``agent/profiling.py``, shared with the daemon)."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from ascend_doctor.agent.holders import npu_process
from ascend_doctor.agent.profiling import MODES, TORCH_KIND, Request, capture, record_artifact
from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.records import Artifact
from ascend_doctor.core.store import Store


def _show(art: Artifact, why: str) -> None:
    click.echo(f"profile: {why}")
    click.echo(
        f"artifact {art.kind}: {art.path} ({art.size_bytes} bytes, "
        f"{art.ended_at - art.started_at:.1f}s captured)"
    )


@click.command("profile")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="auto",
    show_default=True,
    help="torch: vLLM's /start_profile; msprof: attach to --pid; auto: what the server supports.",
)
@click.option("--duration", type=float, default=30.0, show_default=True, help="Seconds to capture.")
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the capture ends up (msprof --output; torch traces are copied here). "
    "Default: STATE_DIR/profiles, else ./profiles.",
)
@click.option(
    "--url",
    default=None,
    help="vLLM server (default: the watched server's, from --state-dir; else 127.0.0.1:8000).",
)
@click.option(
    "--profiler-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="torch_profiler_dir the server was started with (default: from --state-dir when"
    " the doctor started it with profiling.enabled).",
)
@click.option(
    "--pid", type=int, default=None, help="Server pid for msprof (PROFILING_MODE=dynamic)."
)
@click.option("--msprof", "msprof_path", default=None, help="msprof binary (default: from PATH).")
@click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds allowed for each step besides the capture itself.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Record the artifact in this state dir's store.",
)
def profile(
    mode: str,
    duration: float,
    output: Path | None,
    url: str | None,
    profiler_dir: Path | None,
    pid: int | None,
    msprof_path: str | None,
    timeout: float,
    state_dir: Path | None,
) -> None:
    """Capture a profile of the live server (torch profiler or msprof) and record it."""
    if duration < 0:
        raise click.ClickException(f"--duration is {duration}: expected seconds >= 0")
    if state_dir is not None:
        url, profiler_dir, pid = _from_state(state_dir, url, profiler_dir, pid)
    url = url or "http://127.0.0.1:8000"
    out = output or ((state_dir / "profiles") if state_dir else Path("profiles"))
    req = Request(mode, duration, url, profiler_dir, pid, msprof_path, out.absolute(), timeout)
    try:
        art, why = asyncio.run(capture(req))
        if art.kind == TORCH_KIND and output is not None:
            art = _copy(art, output)
        if state_dir is not None:
            record_artifact(state_dir, art)
    except (DoctorError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    _show(art, why)


def _from_state(
    state_dir: Path, url: str | None, profiler_dir: Path | None, pid: int | None
) -> tuple[str | None, Path | None, int | None]:
    """What the watching doctor knows: the server's URL, profiler dir and pid."""
    try:
        store = Store.in_dir(state_dir, readonly=True)
    except DoctorError:
        return url, profiler_dir, pid
    try:
        prof, server = store.profiling(), store.server()
    except DoctorError:
        return url, profiler_dir, pid
    finally:
        store.close()
    if prof is None:
        return url, profiler_dir, pid
    if profiler_dir is None and prof.torch_dir:
        profiler_dir = Path(prof.torch_dir)
    if url is None and prof.url:
        url = prof.url
    if pid is None and prof.msprof and server is not None and server.state.value == "RUNNING":
        # msprof attaches to the process on the card, not to vLLM's API server
        pid = npu_process(server.pid) if server.pid is not None else None
    return url, profiler_dir, pid


def _copy(art: Artifact, output: Path) -> Artifact:
    src = Path(art.path)
    output.mkdir(parents=True, exist_ok=True)
    dst = output.absolute() / src.name
    if dst.resolve() != src.resolve():
        shutil.copytree(src, dst, dirs_exist_ok=True)
    fields: dict[str, Any] = {**asdict(art), "path": str(dst.resolve())}
    return Artifact(**fields)
