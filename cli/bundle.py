"""``ascend-doctor bundle``: everything needed to debug this host elsewhere, as one tar.gz.

The bundle holds the store's state as JSON (incidents with their actions, findings, server
events, latest samples, launch overrides, meta), the tail of every log the tailer followed and
of the server log, ``npu-smi info``, versions, the config with secrets redacted and an index of
the diagnostics artifacts. ``ascend-doctor diagnose BUNDLE.tar.gz`` reads it back: the logs keep
their path under ``logs/`` so each is scanned as the same kind of stream as on the host.

Members are added one at a time (a log's tail is read into memory, at most ``--max-log-mb``);
logs and artifacts that would pass ``--max-mb`` are left out, and MANIFEST.json, written last,
lists every member with its size and every file left out with the reason.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import platform
import re
import shutil
import socket
import sqlite3
import sys
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from ascend_doctor import __version__
from ascend_doctor.cli.common import InputError
from ascend_doctor.core import regex
from ascend_doctor.core.config_file import default_state_dir
from ascend_doctor.core.errors import CollectorError, ConfigError, DoctorError
from ascend_doctor.core.redact import REDACTED, is_secret, redact, redact_text
from ascend_doctor.core.redact_server import redact_server_text
from ascend_doctor.core.safeio import open_regular
from ascend_doctor.core.store import STORE_NAME, Store

MB = 1024 * 1024
NPU_SMI_TIMEOUT = 10.0

_SINCE = regex.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$", re.IGNORECASE)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_UNSAFE = regex.compile(r"[^A-Za-z0-9._/-]")
_BARE_KEY = regex.compile(r"^[A-Za-z0-9_-]+$")


def parse_since(text: str) -> float:
    """``30m``, ``2h``, ``1d`` (or ``45s``) as seconds; ConfigError otherwise."""
    m = _SINCE.match(text)
    if not m:
        raise ConfigError(f"'{text}': expected a number and a unit s, m, h or d (e.g. 2h)")
    return float(m.group(1)) * _UNIT[m.group(2).lower()]


def to_toml(data: dict[str, Any]) -> str:
    """TOML text of parsed TOML data (tables, arrays, scalars; what tomllib returns)."""
    lines: list[str] = []
    _toml_table(data, [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_table(data: dict[str, Any], prefix: list[str], lines: list[str]) -> None:
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    if prefix and (len(tables) < len(data) or not data):
        lines.extend(["", "[" + ".".join(_toml_key(p) for p in prefix) + "]"])
    for k, v in data.items():
        if not isinstance(v, dict):
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for k, v in tables.items():
        _toml_table(v, [*prefix, k], lines)


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    return str(value.isoformat())  # dates and times


@dataclass
class Builder:
    """Adds members to the tar under one top directory and keeps the manifest."""

    tar: tarfile.TarFile
    top: str
    max_bytes: int
    members: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0
    reserved: int = 0
    """Bytes promised to members added later (the store JSON), counted against the limit."""

    def add_bytes(self, name: str, data: bytes, *, log: bool = False, **info: Any) -> None:
        """Add a member from memory (always: store JSON, notes, versions); a ``log`` tail is
        redacted as the server's output is (its token counts kept: ``diagnose`` reads them)."""
        # every member, whatever its source: vLLM prints its non-default args (--api-key)
        data = redact_server_text(data) if log else redact_text(data)
        member = tarfile.TarInfo(f"{self.top}/{name}")
        member.size = len(data)
        member.mtime = int(time.time())
        member.mode = 0o600
        self.tar.addfile(member, io.BytesIO(data))
        self.total += len(data)
        self.members.append({"name": name, "size": len(data), **info})

    def add_json(self, name: str, value: Any) -> None:
        """Add a member holding ``value`` as indented JSON."""
        self.add_bytes(name, _json(value))

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes stay within ``--max-mb``."""
        return self.total + self.reserved + size <= self.max_bytes

    def skip(self, name: str, source: str, reason: str, size: int | None = None) -> None:
        """Record a file left out, with why."""
        self.skipped.append({"name": name, "source": source, "size": size, "reason": reason})


def tail_bytes(path: Path, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of ``path`` starting at a whole line, and the file's size."""
    with open_regular(path) as f:  # never a FIFO, never a link out of its directory
        size = os.fstat(f.fileno()).st_size
        if size <= limit:
            return f.read(), size
        f.seek(size - limit - 1)
        data = f.read(limit + 1)
    cut = data.find(b"\n")
    return (data[cut + 1 :] if cut >= 0 else data[1:]), size


def log_name(path: str) -> str:
    """The member name of a log: ``logs/`` and its absolute path, made safe."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return "logs/" + _UNSAFE.sub("_", "/".join(parts))


def tailed_paths(state_dir: Path) -> list[str]:
    """Every path the tailer checkpointed, from a read-only connection to the store file."""
    db = state_dir / STORE_NAME
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = conn.execute("SELECT DISTINCT path FROM offsets ORDER BY path").fetchall()
        return [str(r[0]) for r in rows]
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def _overlaps(incident: dict[str, Any], cutoff: float) -> bool:
    resolved = incident.get("resolved_at")
    return incident["opened_at"] >= cutoff or resolved is None or resolved >= cutoff


def store_members(state_dir: Path, cutoff: float | None) -> list[tuple[str, bytes]]:
    """The store's state as JSON members under ``store/``; a missing store becomes a note."""
    from ascend_doctor.cli.views import finding_dict, incident_dicts, process_event_dict

    try:
        store = Store.in_dir(state_dir, readonly=True)
    except DoctorError as exc:
        return [("store/NOTE.txt", f"store not included: {exc}\n".encode())]
    try:
        incidents = incident_dicts(store)
        findings = [finding_dict(f) for f in store.findings()]
        events = [process_event_dict(e) for e in store.process_events(limit=1_000_000)]
        if cutoff is not None:
            incidents = [i for i in incidents if _overlaps(i, cutoff)]
            findings = [f for f in findings if f["at"] >= cutoff]
            events = [e for e in events if e["at"] >= cutoff]
        overrides = [asdict(o) for o in store.overrides()]
        for o in overrides:
            if is_secret(o["key"]):
                o["value"] = REDACTED
        parts: dict[str, Any] = {
            "incidents": incidents,
            "findings": findings,
            "process_events": events,
            "samples": {c: store.latest_samples(c) for c in ("npu_smi", "vllm", "process")},
            "overrides": overrides,
            "meta": redact(store.meta_items()),
        }
    finally:
        store.close()
    return [(f"store/{k}.json", _json(v)) for k, v in parts.items()]


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2, default=str).encode()


def add_logs(b: Builder, paths: list[str], max_log_bytes: int) -> None:
    """The tail of each log, while the size limit allows."""
    for path in paths:
        name = log_name(path)
        try:
            data, size = tail_bytes(Path(path), max_log_bytes)
        except OSError as exc:
            b.skip(name, path, f"unreadable: {exc.strerror or exc}")
            continue
        if not b.fits(len(data)):
            b.skip(name, path, f"size limit: would pass --max-mb {b.max_bytes // MB}", len(data))
            continue
        info: dict[str, Any] = {"source": path}
        if len(data) < size:
            info["truncated_from"] = size
        b.add_bytes(name, data, log=True, **info)


def add_npu_smi(b: Builder, npu_smi: str | None) -> None:
    """``npu-smi info`` output, or a note saying why there is none."""
    path = npu_smi or shutil.which("npu-smi")
    if path is None:
        b.add_bytes("npu-smi/NOTE.txt", b"npu-smi not found on PATH\n")
        return
    from ascend_doctor.collectors.npu_smi import run_npu_smi

    try:
        result = asyncio.run(run_npu_smi(path, ["info"], timeout=NPU_SMI_TIMEOUT))
    except CollectorError as exc:
        b.add_bytes("npu-smi/NOTE.txt", f"{exc}\n".encode())
        return
    status = "timed out" if result.timed_out else f"exit status {result.returncode}"
    b.add_bytes("npu-smi/info.txt", result.stdout.encode(), command=" ".join(result.argv))
    if result.stderr or result.timed_out or result.returncode:
        b.add_bytes("npu-smi/info.stderr.txt", f"# {status}\n{result.stderr}".encode())


def add_config(b: Builder, config_path: Path | None) -> None:
    """The config file with secrets redacted; never the raw text."""
    if config_path is None:
        return
    try:
        data = tomllib.loads(config_path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        b.add_bytes("config.NOTE.txt", f"config {config_path} not included: {exc}\n".encode())
        return
    b.add_bytes("config.toml", to_toml(redact(data)).encode(), source=str(config_path))


def preflight(state_dir: Path, npu_smi: str | None) -> Any:
    """``ascend-doctor check --json`` of this host, or why it could not run."""
    from ascend_doctor.cli.check import CheckOptions, run_checks

    try:
        return run_checks(CheckOptions(npu_smi=npu_smi, state_dir=state_dir)).to_json()
    except Exception as exc:  # a failing check must not lose the bundle
        return {"error": f"{type(exc).__name__}: {exc}"}


def versions() -> dict[str, Any]:
    """Python, platform and ascend-doctor versions."""
    return {
        "ascend_doctor": __version__,
        "python": sys.version,
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": socket.gethostname(),
    }


def artifact_files(state_dir: Path) -> Iterator[tuple[Path, int]]:
    """(path, size) of every file under ``state_dir/diagnostics``, sorted."""
    root = state_dir / "diagnostics"
    if not root.is_dir():
        return
    for p in sorted(root.rglob("*")):
        try:
            if p.is_file():
                yield p, p.stat().st_size
        except OSError:
            continue


def add_artifacts(b: Builder, state_dir: Path, with_files: bool) -> None:
    """The artifacts index, and the files themselves with ``--with-artifacts``."""
    files = list(artifact_files(state_dir))
    root = state_dir / "diagnostics"
    b.add_json(
        "artifacts/index.json",
        [{"path": str(p.relative_to(root)), "size": size} for p, size in files],
    )
    if not with_files:
        return
    for p, size in files:
        name = "artifacts/" + _UNSAFE.sub("_", str(p.relative_to(root)))
        if not b.fits(size):
            b.skip(name, str(p), f"size limit: would pass --max-mb {b.max_bytes // MB}", size)
            continue
        try:
            with open_regular(p, [str(root)]) as f:
                data = f.read(size)  # what stat saw, even if it grew since
        except OSError as exc:
            b.skip(name, str(p), f"unreadable: {exc.strerror or exc}")
            continue
        b.add_bytes(name, data, log=p.name.startswith("tail-"), source=str(p))


def build_bundle(
    state_dir: Path,
    output: Path,
    *,
    since: float | None = None,
    max_mb: float = 200,
    max_log_mb: float = 20,
    config_path: Path | None = None,
    with_artifacts: bool = False,
    npu_smi: str | None = None,
    progress: Callable[[str], None] | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """Write the bundle to ``output`` (through a temporary file) and return its manifest."""
    now = time.time() if now is None else now
    host = _UNSAFE.sub("_", socket.gethostname()) or "host"
    top = f"bundle-{host}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}"
    cutoff = now - since if since is not None else None
    server_log = str(state_dir / "server.log")
    logs = [server_log, *(p for p in tailed_paths(state_dir) if p != server_log)]
    store = store_members(state_dir, cutoff)
    steps: list[tuple[str, Callable[[Builder], None]]] = [
        # Logs go first so that diagnose, which scans every member, cites a log line (not its
        # copy in store/findings.json) as the evidence; the store's size is reserved for it.
        ("logs", lambda b: add_logs(b, logs, int(max_log_mb * MB))),
        ("store", lambda b: _add_reserved(b, store)),
        ("npu-smi", lambda b: add_npu_smi(b, npu_smi)),
        ("versions", lambda b: b.add_json("versions.json", versions())),
        ("check", lambda b: b.add_json("check.json", preflight(state_dir, npu_smi))),
        ("config", lambda b: add_config(b, config_path)),
        ("artifacts", lambda b: add_artifacts(b, state_dir, with_artifacts)),
    ]
    partial = output.with_name(output.name + ".partial")
    # 0600 before a byte is in it: the bundle holds log tails and the store
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600))
    os.chmod(partial, 0o600)
    try:
        with tarfile.open(partial, "w:gz") as tar:
            b = Builder(tar, top, int(max_mb * MB), reserved=sum(len(d) for _, d in store))
            for label, step in steps:
                if progress is not None:
                    progress(label)
                step(b)
            manifest = {
                "created_at": now,
                "host": socket.gethostname(),
                "state_dir": str(state_dir),
                "since_seconds": since,
                "max_mb": max_mb,
                "max_log_mb": max_log_mb,
                "total_bytes": b.total,
                "members": b.members,
                "skipped": b.skipped,
            }
            b.add_json("MANIFEST.json", manifest)
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    return manifest


def _add_reserved(b: Builder, members: list[tuple[str, bytes]]) -> None:
    for name, data in members:
        b.reserved -= len(data)
        b.add_bytes(name, data)


def _progress(total: int) -> AbstractContextManager[Callable[[str], None] | None]:
    if not sys.stderr.isatty():
        return nullcontext(None)
    from contextlib import contextmanager

    from rich.console import Console
    from rich.progress import Progress

    @contextmanager
    def bar() -> Iterator[Callable[[str], None]]:
        with Progress(console=Console(stderr=True), transient=True) as p:
            task = p.add_task("bundle", total=total)

            def step(label: str) -> None:
                p.update(task, advance=1, description=f"bundle: {label}")

            yield step

    return bar()


@click.command("bundle")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The tar.gz to write (default ./ascend-doctor-bundle-<host>-<timestamp>.tar.gz).",
)
@click.option(
    "--since", default=None, help="Only incidents, findings and events of the last 30m, 2h, 1d..."
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The doctor's state dir (default: as for watch).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Config file to include, with secrets redacted.",
)
@click.option("--max-mb", type=float, default=200.0, show_default=True, help="Bundle size limit.")
@click.option("--max-log-mb", type=float, default=20.0, show_default=True, help="Tail per log.")
@click.option("--with-artifacts", is_flag=True, help="Include the diagnostics artifacts.")
@click.option("--npu-smi", "npu_smi", default=None, help="npu-smi binary (default: on PATH).")
def bundle(
    output: Path | None,
    since: str | None,
    state_dir: Path | None,
    config_path: Path | None,
    max_mb: float,
    max_log_mb: float,
    with_artifacts: bool,
    npu_smi: str | None,
) -> None:
    """Pack incidents, findings, log tails, npu-smi output and versions for offline debugging."""
    try:
        seconds = parse_since(since) if since is not None else None
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    state = state_dir if state_dir is not None else default_state_dir()
    if output is not None and not output.absolute().parent.is_dir():
        # a typo in -o must not leave a tree of new directories behind
        raise InputError(f"{output.parent}: no such directory (create it first)")
    if not state.is_dir():
        raise click.ClickException(f"{state}: no state dir here (has the doctor run?)")
    now = time.time()
    if output is None:
        host = _UNSAFE.sub("_", socket.gethostname()) or "host"
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        output = Path(f"ascend-doctor-bundle-{host}-{stamp}.tar.gz")
    with _progress(6) as progress:
        manifest = build_bundle(
            state,
            output,
            since=seconds,
            max_mb=max_mb,
            max_log_mb=max_log_mb,
            config_path=config_path,
            with_artifacts=with_artifacts,
            npu_smi=npu_smi,
            progress=progress,
            now=now,
        )
    for s in manifest["skipped"]:
        click.echo(f"left out {s['source']}: {s['reason']}", err=True)
    size = output.stat().st_size
    click.echo(f"{output} ({size / MB:.1f} MB, {len(manifest['members'])} files)")


__all__ = [
    "build_bundle",
    "bundle",
    "is_secret",
    "log_name",
    "parse_since",
    "redact",
    "tail_bytes",
    "to_toml",
]
