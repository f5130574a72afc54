"""Profile capture of the live server (the daemon's ``capture_profile`` action and the
``ascend-doctor profile`` command both use it).

Two ways in (FORMATS.md sections 4 and 5):

- ``torch``: vLLM started with ``--profiler-config`` (or ``VLLM_TORCH_PROFILER_DIR``) has
  ``POST /start_profile`` and ``POST /stop_profile``; the trace lands in a new
  ``*_ascend_pt`` directory under the profiler dir the server was started with.
- ``msprof``: a server started with ``PROFILING_MODE=dynamic`` accepts
  ``msprof --dynamic=on --pid=PID --output=DIR``, driven by ``start``/``stop``/``quit`` on
  its prompt; the capture lands in a new ``PROF_*`` directory under DIR.

Each capture is recorded as an artifact (kind, path, size, time span) in the store, with
the analysis of it (``collectors/profiling``: the step split, top operators, copies, the
slow rank; msprof-analyze's advisor where it is installed) as its ``analysis``.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import httpx

from ascend_doctor.collectors.profiling import analyze, render_text
from ascend_doctor.core.config import ProfilingConfig
from ascend_doctor.core.errors import RemediationError
from ascend_doctor.core.records import Artifact, ProfileSummary, ProfilingSetup
from ascend_doctor.core.store import Store
from ascend_doctor.core.words import plural

TORCH_KIND = "torch_profile"
MSPROF_KIND = "msprof_profile"
MODES = ("auto", "torch", "msprof")


class ProfileError(RemediationError):
    """A capture could not be taken; the message is shown as one line."""


def dir_size(path: Path) -> int:
    """Total size in bytes of the regular files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def record_artifact(state_dir: Path, artifact: Artifact) -> None:
    """Record ``artifact`` in the store of ``state_dir``."""
    store = Store.in_dir(state_dir)
    try:
        store.add_artifact(artifact)
    finally:
        store.close()


def capture_dirs(art: Artifact) -> list[Path]:
    """The directories of one capture: a torch capture writes one ``*_ascend_pt`` per rank
    (each worker its own), all created after the capture started; msprof writes one."""
    top = Path(art.path)
    if art.kind != TORCH_KIND or not top.parent.is_dir():
        return [top]
    # A second of slack: the directory's time and time.time() come from different clocks.
    siblings = [
        p
        for p in top.parent.glob("*_ascend_pt")
        if p.is_dir() and not p.is_symlink() and p.stat().st_mtime >= art.started_at - 1.0
    ]
    return sorted({top, *siblings})


def summarize(art: Artifact, advisor: bool = True) -> Artifact:
    """``art`` with the analysis of its capture; a capture that cannot be read says why
    in its summary instead (the capture itself is kept either way)."""
    try:
        report = analyze(capture_dirs(art), advisor=advisor)
    except (OSError, ValueError) as exc:
        summary = ProfileSummary(f"analysis failed: {exc}", "")
    else:
        slow = report.slowest.rank if report.slowest is not None else None
        summary = ProfileSummary(report.headline, render_text(report), slow, report.advisor_status)
    return replace(art, analysis=summary)


def _new_dirs(root: Path, pattern: str, before: set[Path]) -> list[Path]:
    if not root.is_dir():
        return []
    found = [p for p in root.glob(pattern) if p.is_dir() and p not in before]
    return sorted(found, key=lambda p: p.stat().st_mtime)


async def _await_new_dir(root: Path, pattern: str, before: set[Path], timeout: float) -> Path:
    # The trace is written after stop returns on real hardware; give it time to appear.
    deadline = time.monotonic() + timeout
    while True:
        found = _new_dirs(root, pattern, before)
        if found:
            return found[-1]
        if time.monotonic() > deadline:
            raise ProfileError(f"no new {pattern} directory appeared under {root} in {timeout}s")
        await asyncio.sleep(0.1)


async def _wait(duration: float, label: str) -> None:
    """Sleep ``duration`` seconds, with a progress bar when stdout is a terminal."""
    if not sys.stdout.isatty():
        await asyncio.sleep(duration)
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn(), transient=True
    ) as bar:
        task = bar.add_task(label, total=duration)
        end = time.monotonic() + duration
        while (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(0.2, left))
            bar.update(task, completed=duration - max(0.0, end - time.monotonic()))


# -- torch -----------------------------------------------------------------------------


async def _post(client: httpx.AsyncClient, url: str) -> int:
    try:
        return (await client.post(url)).status_code
    except httpx.HTTPError as exc:
        raise ProfileError(f"cannot reach {url}: {exc or type(exc).__name__}") from None


async def torch_start(client: httpx.AsyncClient, url: str) -> bool:
    """POST /start_profile; False when the route does not exist (no profiler config)."""
    status = await _post(client, f"{url}/start_profile")
    if status == 404:
        return False
    if status != 200:
        raise ProfileError(f"POST {url}/start_profile answered {status}")
    return True


PROGRESS_WINDOW = 1.0
"""Seconds between the two /metrics reads that tell a busy engine from a stuck one."""


def _running_and_tokens(text: str) -> tuple[float, float]:
    running = tokens = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            running += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:generation_tokens_total{"):
            tokens += float(line.rsplit(" ", 1)[1])
    return running, tokens


async def check_progress(
    client: httpx.AsyncClient, url: str, window: float = PROGRESS_WINDOW
) -> None:
    """Refuse (ProfileError) when the engine has requests running and generates nothing: vLLM
    routes /start_profile and /stop_profile through the engine's busy loop, so they would wait
    on a stuck step forever."""
    try:
        running, before = _running_and_tokens((await client.get(f"{url}/metrics")).text)
        if running <= 0:
            return
        await asyncio.sleep(window)
        running, after = _running_and_tokens((await client.get(f"{url}/metrics")).text)
    except (httpx.HTTPError, ValueError, IndexError):
        return  # no metrics to judge by: the request timeouts still bound the capture
    if running > 0 and after <= before:
        raise ProfileError(
            f"the engine has {plural(running, 'request')} running and generated no token in "
            f"{window:g}s: a profile request would wait on its stuck step"
        )


async def torch_capture(
    url: str, profiler_dir: Path, duration: float, timeout: float, started: bool = False
) -> Artifact:
    """Start (unless ``started``), wait, stop, and locate the new ``*_ascend_pt`` directory.
    Every request is bounded by ``timeout``; a stuck engine is refused before the start."""
    before = set(profiler_dir.glob("*_ascend_pt")) if profiler_dir.is_dir() else set()
    async with httpx.AsyncClient(trust_env=False, timeout=timeout) as client:
        if not started:
            await check_progress(client, url)
        began = time.time()
        if not started and not await torch_start(client, url):
            raise ProfileError(
                f"{url}/start_profile is 404: the server was not started with "
                "--profiler-config (or VLLM_TORCH_PROFILER_DIR)"
            )
        try:
            await _wait(duration, "torch profile")
        finally:
            status = await _post(client, f"{url}/stop_profile")
        ended = time.time()
        if status != 200:
            raise ProfileError(f"POST {url}/stop_profile answered {status}")
    top = await _await_new_dir(profiler_dir, "*_ascend_pt", before, timeout)
    return Artifact(TORCH_KIND, str(top.resolve()), dir_size(top), began, ended)


# -- msprof ----------------------------------------------------------------------------


def find_msprof(given: str | None) -> str | None:
    """The msprof binary: ``given`` (a path or name) or the one on PATH; None if absent."""
    return shutil.which(given or "msprof")


async def _send(proc: asyncio.subprocess.Process, line: str) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(line.encode() + b"\n")
        await proc.stdin.drain()


def _last_line(text: str) -> str:
    lines = [ln.strip().lstrip("> ").strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else "no output"


async def msprof_capture(
    msprof: str, pid: int, output: Path, duration: float, timeout: float
) -> Artifact:
    """Attach ``msprof --dynamic=on`` to ``pid``, drive start/stop/quit, locate ``PROF_*``."""
    output.mkdir(parents=True, exist_ok=True)
    before = set(output.glob("PROF_*"))
    argv: Sequence[str] = [msprof, "--dynamic=on", f"--pid={pid}", f"--output={output}"]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        raise ProfileError(f"cannot run {msprof}: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    reader = asyncio.ensure_future(proc.stdout.read())
    try:
        began = time.time()
        await _send(proc, "start")
        # An exit before the window is over is a refusal (bad pid, not dynamic...).
        await _wait_or_exit(proc, duration)
        if proc.returncode is None:
            await _send(proc, "stop")
            await _send(proc, "quit")
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                raise ProfileError(f"msprof did not quit within {timeout}s; killed") from None
        ended = time.time()
        text = (await asyncio.wait_for(reader, timeout)).decode(errors="replace")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        reader.cancel()
    if proc.returncode != 0:
        raise ProfileError(f"msprof exited {proc.returncode}: {_last_line(text)}")
    top = await _await_new_dir(output, "PROF_*", before, timeout)
    return Artifact(MSPROF_KIND, str(top.resolve()), dir_size(top), began, ended)


async def _wait_or_exit(proc: asyncio.subprocess.Process, duration: float) -> None:
    """Wait ``duration`` (progress bar on a tty) unless msprof exits first."""
    waiter = asyncio.ensure_future(proc.wait())
    sleeper = asyncio.ensure_future(_wait(duration, "msprof profile"))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, sleeper):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(waiter, sleeper, return_exceptions=True)


# -- the daemon's profiler -------------------------------------------------------------


class ServerProfiler:
    """Captures a torch profile of the server the doctor runs (the ``capture_profile`` action
    and the operator's ``p`` request), and records it in the store."""

    def __init__(
        self, store: Store, config: ProfilingConfig, url: Callable[[], str], torch_dir: Path
    ) -> None:
        self.store = store
        self.config = config
        self._url = url
        self.torch_dir = torch_dir
        """Where the server writes its torch traces (``--profiler-config``)."""

    def prepare(self) -> None:
        """Before the server starts with ``profiling.enabled``: the folder its torch traces go
        to, and the setup in the store for ``ascend-doctor profile``."""
        if self.config.enabled:
            self.torch_dir.mkdir(parents=True, exist_ok=True)
            setup = ProfilingSetup(str(self.torch_dir), self._url(), self.config.msprof)
            self.store.set_profiling(setup)

    async def capture(self) -> Artifact:
        """One capture of ``profiling.capture_seconds``, recorded; ProfileError when the
        server has no profiler."""
        if not self.config.enabled or not self._url():
            raise ProfileError("profiling.enabled is off: the server has no profiler")
        art = await torch_capture(
            self._url(), self.torch_dir, self.config.capture_seconds, timeout=60
        )
        # Reading a capture is CPU-bound for a second or more (bench/profile_analysis.py: 0.9 s
        # for 30 MiB) and the advisor for minutes: off the daemon's loop.
        art = await asyncio.to_thread(summarize, art, self.config.advisor)
        self.store.add_artifact(art)
        return art
