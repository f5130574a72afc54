"""``ascend-doctor profile``: capture a profile of the live server, analyse it and record it
(the capture itself is ``agent/profiling.py``, shared with the daemon); ``ascend-doctor
profile analyze DIR`` reads any capture (``collectors/profiling``)."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import click
import httpx

from ascend_doctor.agent.profiling import (
    MODES,
    TORCH_KIND,
    ProfileError,
    check_progress,
    find_msprof,
    msprof_capture,
    record_artifact,
    summarize,
    torch_capture,
    torch_start,
)
from ascend_doctor.collectors.profiling import analyze, render_text
from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.procs import npu_process
from ascend_doctor.core.records import Artifact
from ascend_doctor.core.store import Store


@dataclass(frozen=True)
class Request:
    """What the operator asked for, from the command line."""

    mode: str
    duration: float
    url: str
    profiler_dir: Path | None
    pid: int | None
    msprof: str | None
    output: Path
    timeout: float


async def capture(req: Request) -> tuple[Artifact, str]:
    """Take one capture as ``req`` says; return the artifact and why this mode was used."""
    url = req.url.rstrip("/")
    if req.mode == "torch":
        if req.profiler_dir is None:
            raise ProfileError(
                "torch mode needs --profiler-dir DIR: the torch_profiler_dir the server "
                "was started with (--profiler-config or VLLM_TORCH_PROFILER_DIR)"
            )
        art = await torch_capture(url, req.profiler_dir, req.duration, req.timeout)
        return art, "torch mode requested"
    if req.mode == "msprof":
        return await _msprof(req), "msprof mode requested"
    return await _auto(req, url)


async def _msprof(req: Request) -> Artifact:
    if req.pid is None:
        raise ProfileError(
            "msprof mode needs --pid PID: the server started with PROFILING_MODE=dynamic"
        )
    msprof = find_msprof(req.msprof)
    if msprof is None:
        raise ProfileError(_no_msprof(req.msprof))
    return await msprof_capture(msprof, req.pid, req.output, req.duration, req.timeout)


def _no_msprof(given: str | None) -> str:
    if given:
        return f"msprof '{given}' not found or not executable"
    return "msprof not found on PATH (source the CANN toolkit's set_env.sh, or pass --msprof)"


async def _auto(req: Request, url: str) -> tuple[Artifact, str]:
    why_not: list[str] = []
    if req.profiler_dir is None:
        why_not.append("torch: no --profiler-dir given")
    else:
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=req.timeout) as client:
                await check_progress(client, url)
                started = await torch_start(client, url)
        except ProfileError as exc:
            why_not.append(f"torch: {exc}")
        else:
            if started:
                art = await torch_capture(
                    url, req.profiler_dir, req.duration, req.timeout, started=True
                )
                return art, f"{url}/start_profile answered"
            why_not.append(
                f"torch: {url}/start_profile is 404 (server started without --profiler-config)"
            )
    if req.pid is None:
        why_not.append("msprof: no --pid given")
    elif find_msprof(req.msprof) is None:
        why_not.append(f"msprof: {_no_msprof(req.msprof)}")
    else:
        return await _msprof(req), f"msprof attached to pid {req.pid} ({'; '.join(why_not)})"
    raise ProfileError("no profiler available; " + "; ".join(why_not))


# -- command ---------------------------------------------------------------------------


def _show(art: Artifact, why: str) -> None:
    click.echo(f"profile: {why}")
    click.echo(
        f"artifact {art.kind}: {art.path} ({art.size_bytes} bytes, "
        f"{art.ended_at - art.started_at:.1f}s captured)"
    )
    if art.analysis is not None:
        click.echo("")
        click.echo(art.analysis.report or art.analysis.headline, nl=False)


@click.group("profile", invoke_without_command=True)
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
@click.option(
    "--no-advisor", is_flag=True, help="Do not run msprof-analyze's advisor on the capture."
)
@click.pass_context
def profile(
    ctx: click.Context,
    mode: str,
    duration: float,
    output: Path | None,
    url: str | None,
    profiler_dir: Path | None,
    pid: int | None,
    msprof_path: str | None,
    timeout: float,
    state_dir: Path | None,
    no_advisor: bool,
) -> None:
    """Capture a profile of the live server (torch profiler or msprof), analyse it and
    record it; `profile analyze DIR` reads a capture already on disk."""
    if ctx.invoked_subcommand is not None:
        return
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
        art = summarize(art, advisor=not no_advisor)
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
    return replace(art, path=str(dst.resolve()))


@profile.command("analyze")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object.")
@click.option(
    "--no-advisor", is_flag=True, help="Do not run msprof-analyze's advisor (when installed)."
)
def analyze_command(directory: Path, as_json: bool, no_advisor: bool) -> None:
    """Where the time goes in a capture: per rank the step split (computing, communication
    not overlapped, free), top operators, host<->device copies, collectives, and the slow
    rank; msprof-analyze's high-priority findings where it is installed."""
    report = analyze(directory, advisor=not no_advisor)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(render_text(report), nl=False)
    if not report.ranks:
        raise SystemExit(2)
