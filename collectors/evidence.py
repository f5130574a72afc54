"""Evidence of a live server, kept before anything restarts or resets it.

When the doctor (or the supervisor, after failed probes or a crash) restarts a stuck server,
why it was stuck dies with it. Before that, :func:`capture` writes one directory: the Python
stacks of every server process (``py-spy dump`` when it is installed, the ``stacks`` extra;
else what ``/proc`` says of each thread: its state, where it waits in the kernel), npu-smi's
health and ECC counters for the server's devices, the tail of every log and the last
``/metrics``, with an ``index.json`` naming each file. :func:`prune` keeps the evidence
directories within a count and a size, oldest first out, so a crash loop cannot fill the disk.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from ascend_doctor.collectors.npu_smi import run_npu_smi
from ascend_doctor.core.config import EvidenceConfig
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.procs import descendants
from ascend_doctor.core.redact import redact_text
from ascend_doctor.core.redact_server import redact_server_text
from ascend_doctor.core.safeio import open_regular, private_dir, write_private

log = logging.getLogger(__name__)

TAIL_BYTES = 64 << 10
"""How much of each log a snapshot keeps."""
INDEX = "index.json"
"""The file that names every other file of a snapshot."""
PROC = Path("/proc")


@dataclass(frozen=True)
class EvidenceFile:
    """One file of a snapshot."""

    name: str
    """File name inside the snapshot directory."""
    kind: str
    """``stacks``, ``npu-smi``, ``log``, ``metrics`` or ``error``."""
    bytes: int
    """Its size."""
    about: str = ""
    """What it is of (a pid, a device, a log's path, a command)."""


@dataclass(frozen=True)
class EvidenceIndex:
    """What one snapshot holds (``index.json``)."""

    dir: str
    """The snapshot directory."""
    reason: str
    """Why it was taken (the step or the supervisor's restart)."""
    at: float
    """Wall time it was taken."""
    pids: list[int] = field(default_factory=list)
    """Server processes whose stacks it holds."""
    devices: list[int] = field(default_factory=list)
    """NPUs whose health and ECC counters it holds."""
    files: list[EvidenceFile] = field(default_factory=list)
    """Every file, in the order written."""
    stacks_by: str = ""
    """``py-spy`` or ``/proc`` (kernel side only: no Python frames)."""


def proc_threads(pid: int, proc: Path = PROC) -> str:
    """Each thread of ``pid`` as ``/proc`` shows it: name, state, the kernel function it waits
    in (``wchan``) and its kernel stack where readable (root). '' when the process is gone."""
    base = proc / str(pid)
    try:
        cmdline = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        tasks = sorted((base / "task").iterdir(), key=lambda p: int(p.name))
    except (OSError, ValueError):
        return ""
    lines = [f"pid {pid}: {cmdline.strip()}"]
    for task in tasks:
        state = ""
        for line in _read(task / "status").splitlines():
            if line.startswith("State:"):
                state = line.split(":", 1)[1].strip()
        comm = _read(task / "comm").strip()
        wchan = _read(task / "wchan").strip() or "-"
        lines.append(f"  thread {task.name} ({comm}) {state} wchan={wchan}")
        lines.extend(f"    {frame}" for frame in _read(task / "stack").splitlines())
    return "\n".join(lines) + "\n"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


class _Writer:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.files: list[EvidenceFile] = []

    def put(self, name: str, kind: str, data: bytes | str, about: str = "") -> None:
        # the server's argv and log lines may carry secrets (an --api-key, a token in a URL);
        # a log's token counts stay (the rules read them)
        raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
        raw = redact_server_text(raw) if kind == "log" else redact_text(raw)
        write_private(self.out / name, raw)
        self.files.append(EvidenceFile(name, kind, len(raw), about))


async def capture(
    out: Path,
    *,
    reason: str,
    pids: Sequence[int] = (),
    devices: Sequence[int] = (),
    npu_smi: str = "npu-smi",
    timeout: float = 10.0,
    log_paths: Iterable[str] = (),
    metrics_url: str = "",
    py_spy: str | None = None,
) -> EvidenceIndex:
    """Write one snapshot into ``out`` (created) and return its index. Every part is best
    effort: a part that fails writes what failed instead, and the rest still comes."""
    private_dir(out.parent)
    private_dir(out)
    w = _Writer(out)
    tree = list(dict.fromkeys(p for root in pids for p in (root, *descendants(root))))
    spy = py_spy if py_spy is None else shutil.which(py_spy)
    by_spy = [await _stacks(w, pid, spy, timeout) for pid in tree]
    commands = [("npu-smi-info", ["info"])]
    for dev in devices:
        commands.append((f"npu-smi-health-{dev}", ["info", "-t", "health", "-i", str(dev)]))
        commands.append((f"npu-smi-ecc-{dev}", ["info", "-t", "ecc", "-i", str(dev)]))
    for name, args in commands:
        command = " ".join(("npu-smi", *args))
        try:
            res = await run_npu_smi(npu_smi, args, timeout=timeout)
        except CollectorError as exc:
            w.put(f"{name}.txt", "error", f"{command}: {exc}\n", command)
            continue
        said = res.stdout + res.stderr
        if res.returncode != 0:
            said += f"\n[{command}: exit status {res.returncode}, timed out: {res.timed_out}]\n"
        w.put(f"{name}.txt", "npu-smi", said, command)
    for n, path in enumerate(log_paths):
        try:
            with open_regular(path) as f:  # never a FIFO, never a link out of its dir
                f.seek(0, 2)
                f.seek(max(0, f.tell() - TAIL_BYTES))
                tail = f.read(TAIL_BYTES)
        except OSError:
            continue  # rotated away or unreadable: the other logs still come
        w.put(f"tail-{n}-{Path(path).name}", "log", tail, path)
    if metrics_url:
        try:
            async with httpx.AsyncClient(timeout=min(timeout, 3.0), trust_env=False) as client:
                scraped = (await client.get(metrics_url)).content
            w.put("metrics.txt", "metrics", scraped, metrics_url)
        except httpx.HTTPError as exc:
            w.put("metrics.txt", "error", f"/metrics: {type(exc).__name__}: {exc}\n", metrics_url)
    index = EvidenceIndex(
        str(out),
        reason,
        time.time(),
        tree,
        list(devices),
        w.files,
        "py-spy" if by_spy and all(by_spy) else "/proc",
    )
    write_private(out / INDEX, json.dumps(asdict(index), indent=1).encode())
    return index


async def _stacks(w: _Writer, pid: int, spy: str | None, timeout: float) -> bool:
    """The stacks of ``pid``: py-spy's Python frames, else /proc's kernel side (with why
    py-spy said nothing: no ptrace permission, a Python it does not know). True: py-spy's."""
    why = ""
    if spy is not None:
        try:
            res = await run_npu_smi(spy, ["dump", "--pid", str(pid)], timeout=timeout)
            if res.returncode == 0 and res.stdout.strip():
                w.put(f"stacks-{pid}.txt", "stacks", res.stdout, f"py-spy dump --pid {pid}")
                return True
            said = (res.stderr or res.stdout).strip().splitlines()
            why = f"py-spy dump failed: {said[0] if said else res.returncode}\n"
        except CollectorError as exc:
            why = f"py-spy dump failed: {exc}\n"
    text = proc_threads(pid)
    if text:
        w.put(f"stacks-{pid}.txt", "stacks", why + text, f"/proc/{pid}/task")
    return False


def read_index(directory: Path) -> EvidenceIndex | None:
    """A snapshot's index, None when it has none or it does not parse."""
    try:
        data = json.loads((directory / INDEX).read_text(encoding="utf-8"))
        files = [EvidenceFile(**f) for f in data.pop("files")]
        return EvidenceIndex(**data, files=files)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def prune(root: Path, *, keep: int, max_bytes: int, protect: Path | None = None) -> list[Path]:
    """Remove the oldest snapshot directories under ``root`` until at most ``keep`` remain
    and they add up to at most ``max_bytes`` (``protect``, the newest, always stays)."""
    try:
        dirs = sorted(
            (d for d in root.iterdir() if d.is_dir()), key=lambda d: (d.stat().st_mtime, d.name)
        )
    except OSError:
        return []
    sizes = {d: sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in dirs}
    removed = []
    while dirs and (len(dirs) > keep or sum(sizes[d] for d in dirs) > max_bytes):
        victim = next((d for d in dirs if d != protect), None)
        if victim is None:
            break
        shutil.rmtree(victim, ignore_errors=True)
        dirs.remove(victim)
        removed.append(victim)
    return removed


class Keeper:
    """Takes snapshots of one watched server into one directory, within its bounds."""

    def __init__(
        self,
        root: Path,
        *,
        keep: int,
        max_bytes: int,
        pids: Callable[[], Sequence[int]],
        devices: Callable[[], Sequence[int]],
        log_paths: Callable[[], Iterable[str]],
        npu_smi: str,
        metrics_url: Callable[[], str],
        py_spy: str | None = "py-spy",
        timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root = root
        self.keep, self.max_bytes = keep, max_bytes
        self._pids, self._devices, self._logs = pids, devices, log_paths
        self.npu_smi, self._metrics_url = npu_smi, metrics_url
        self.py_spy, self.timeout, self._clock = py_spy, timeout, clock
        self.on_supervisor_restart = True

    @classmethod
    def from_config(
        cls,
        config: EvidenceConfig,
        root: Path,
        *,
        pid: Callable[[], int | None],
        devices: Callable[[], Sequence[int]],
        log_paths: Callable[[], Iterable[str]],
        npu_smi: str,
        metrics_url: Callable[[], str],
    ) -> Keeper:
        """The keeper ``[evidence]`` describes, for the server whose main pid ``pid`` gives."""
        keeper = cls(
            root,
            keep=config.keep,
            max_bytes=int(config.max_mb * (1 << 20)),
            pids=lambda: [p for p in (pid(),) if p is not None and config.stacks],
            devices=devices,
            log_paths=log_paths,
            npu_smi=npu_smi,
            metrics_url=metrics_url,
            py_spy=config.py_spy,
        )
        keeper.on_supervisor_restart = config.on_supervisor_restart
        return keeper

    async def before_restart(self, name: str, reason: str) -> None:
        """``take`` before the supervisor's own restart (after failed probes, a crash), when
        ``[evidence] on_supervisor_restart``; a failure is logged, never stops the restart."""
        if not self.on_supervisor_restart:
            return
        try:
            await self.take(name, reason)
        except Exception:  # a failing part is logged and isolated; the restart goes on
            log.exception("evidence before the %s restart not kept", name)

    async def take(self, name: str, reason: str) -> EvidenceIndex:
        """One snapshot in ``root/<name>-<time>``; older ones pruned to the bounds after."""
        out = self.root / f"{name}-{self._clock():.0f}"
        index = await capture(
            out,
            reason=reason,
            pids=[p for p in self._pids() if p],
            devices=list(self._devices()),
            npu_smi=self.npu_smi,
            timeout=self.timeout,
            log_paths=list(self._logs()),
            metrics_url=self._metrics_url(),
            py_spy=self.py_spy,
        )
        prune(self.root, keep=self.keep, max_bytes=self.max_bytes, protect=out)
        return index


__all__ = [
    "INDEX",
    "EvidenceFile",
    "EvidenceIndex",
    "Keeper",
    "capture",
    "proc_threads",
    "prune",
    "read_index",
]
