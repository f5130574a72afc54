"""``ascend-doctor check``: preflight of a host before serving.

Each check gives one :class:`CheckResult` row (pass, warn, fail or skip, with the fix). Every
absolute path read from the host goes through ``--root`` and every command is injectable
(``--python``, ``--npu-smi``), so the tests run the real code on fixture trees. The
compatibility table is data: ``rules/compat.yaml``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from ascend_doctor.collectors.npu_smi import NpuInfo, dcmi_error, parse_info, run_npu_smi
from ascend_doctor.core.config import default_state_dir
from ascend_doctor.core.errors import DoctorError

DRIVER_INFO = "/usr/local/Ascend/driver/version.info"
FIRMWARE_INFO = "/usr/local/Ascend/firmware/version.info"
TOOLKIT_LATEST = "/usr/local/Ascend/ascend-toolkit/latest"
TOOLKIT_INFO = "ascend_toolkit_install.info"
SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
MEMINFO = "/proc/meminfo"
PACKAGES = ("torch", "torch_npu", "vllm", "vllm_ascend")
"""Distributions probed in the serving environment, in table order."""
PYTHON_TIMEOUT = 20.0
NPU_SMI_TIMEOUT = 10.0
MIN_FREE_BYTES = 1 << 30

# Run as ``python -c PROBE``: one JSON object {distribution: version or null} on the last line.
PROBE = (
    "import importlib.metadata as m, json\n"
    "def v(d):\n"
    "    try:\n"
    "        return m.version(d)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    f"print(json.dumps({{d: v(d) for d in {PACKAGES!r}}}))\n"
)


from ascend_doctor.cli.compat import (  # noqa: E402
    CheckResult,
    CompatRow,
    Status,
    cann_key,
    compat_checks,
    find_row,
    load_compat,
    release,
)


@dataclass(frozen=True)
class CheckOptions:
    """Everything the checks read from, injectable for tests."""

    root: Path = Path("/")
    """Prefix of every absolute host path (driver, toolkit, /proc/meminfo)."""
    python: str = sys.executable
    """Interpreter of the serving environment."""
    npu_smi: str | None = None
    """``npu-smi`` binary; None looks it up on ``PATH`` of ``env``."""
    port: int = 8000
    """Serving port that must be free on 127.0.0.1."""
    state_dir: Path = field(default_factory=default_state_dir)
    """Where logs go; its file system needs free space."""
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    """Environment the server would start with."""
    compat: Path | None = None
    """Compatibility table; None is the shipped ``rules/compat.yaml``."""


@dataclass(frozen=True)
class CheckReport:
    """All rows, and whether any Ascend software was found at all."""

    results: tuple[CheckResult, ...]
    """The rows in table order."""
    ascend_found: bool
    """False when neither driver, toolkit nor npu-smi exists."""

    def summary(self) -> dict[str, int]:
        """Count of rows per status."""
        return {s.value: sum(r.status is s for r in self.results) for s in Status}

    @property
    def failed(self) -> bool:
        """True when any row failed."""
        return any(r.status is Status.FAIL for r in self.results)

    def to_json(self) -> dict[str, Any]:
        """``{"checks": [...], "summary": {...}, "ascend_found": bool}``."""
        return {
            "checks": [asdict(r) | {"status": r.status.value} for r in self.results],
            "summary": self.summary(),
            "ascend_found": self.ascend_found,
        }


# -- host files -------------------------------------------------------------------------------


def under(root: Path, path: str) -> Path:
    """``path`` (absolute) inside ``root``."""
    return root / path.lstrip("/")


def read_pairs(path: Path) -> dict[str, str]:
    """``key=value`` lines (keys lower-cased); empty when the file cannot be read."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    pairs: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            pairs.setdefault(key.strip().lower(), value.strip().strip('"'))
    return pairs


def toolkit_info(root: Path) -> tuple[Path | None, str | None]:
    """The toolkit's install-info file under ``latest`` and its ``version``."""
    latest = under(root, TOOLKIT_LATEST)
    for info in [*sorted(latest.glob(f"*-linux/{TOOLKIT_INFO}")), latest / TOOLKIT_INFO]:
        if info.is_file():
            return info, read_pairs(info).get("version")
    return None, None


def _version_file(name: str, path: Path, what: str, missing: Status, fix: str) -> CheckResult:
    if not path.is_file():
        return CheckResult(name, missing, f"{what} not found ({path})", fix)
    version = read_pairs(path).get("version")
    if not version:
        return CheckResult(name, Status.WARN, f"{path} has no Version= line", fix)
    return CheckResult(name, Status.PASS, f"{what} {version}")


# -- environment ------------------------------------------------------------------------------


def probe_python(python: str) -> tuple[dict[str, str | None] | None, str]:
    """Versions of :data:`PACKAGES` in ``python``'s environment, or None and why."""
    try:
        proc = subprocess.run(
            [python, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=PYTHON_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot run {python}: {exc}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not lines:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"{python} exited {proc.returncode}: {err}"
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None, f"{python} printed {lines[-1][:80]!r}, not the probe's JSON"
    if not isinstance(data, dict):
        return None, f"{python} printed {lines[-1][:80]!r}, not the probe's JSON"
    return {p: (str(data[p]) if data.get(p) else None) for p in PACKAGES}, ""


def _npu_smi(opts: CheckOptions) -> tuple[list[CheckResult], NpuInfo | None, bool]:
    path = opts.npu_smi or shutil.which("npu-smi", path=opts.env.get("PATH", os.defpath))
    if path is None:
        fix = "install the Ascend driver (it ships npu-smi) or pass --npu-smi PATH"
        return [CheckResult("npu_smi", Status.FAIL, "npu-smi not found on PATH", fix)], None, False
    try:
        res = asyncio.run(run_npu_smi(path, ["info"], timeout=NPU_SMI_TIMEOUT))
    except DoctorError as exc:
        return (
            [CheckResult("npu_smi", Status.FAIL, str(exc), "check the npu-smi binary")],
            None,
            False,
        )
    if res.timed_out:
        detail = f"{path} info hung for {NPU_SMI_TIMEOUT:.0f} s"
        return [CheckResult("npu_smi", Status.FAIL, detail, "check the driver (dmesg)")], None, True
    try:
        info = parse_info(res.stdout)
    except DoctorError as exc:
        code = dcmi_error(res.stdout + res.stderr)
        fix = (
            "the device is held by another container or needs privileges (dcmi -8005)"
            if code == -8005
            else "run `npu-smi info` by hand and check the driver"
        )
        return (
            [CheckResult("npu_smi", Status.FAIL, f"{exc} (exit {res.returncode})", fix)],
            None,
            True,
        )
    rows = [CheckResult("npu_smi", Status.PASS, f"{path}: {len(info.devices)} chip(s)")]
    bad = [f"NPU {d.npu} chip {d.chip}: {d.health}" for d in info.devices if d.health != "OK"]
    if not info.devices:
        rows.append(
            CheckResult("npu.health", Status.FAIL, "npu-smi lists no device", "check the driver")
        )
    elif bad:
        fix = (
            "run `npu-smi info -t health -i N -c C` for the error code; reset or replace the device"
        )
        rows.append(CheckResult("npu.health", Status.FAIL, "; ".join(bad), fix))
    else:
        rows.append(CheckResult("npu.health", Status.PASS, f"all {len(info.devices)} chip(s) OK"))
    return rows, info, True


def visible_devices(env: Mapping[str, str], info: NpuInfo | None) -> CheckResult:
    """``ASCEND_RT_VISIBLE_DEVICES`` names existing logical devices, each once."""
    name, value = "visible_devices", env.get("ASCEND_RT_VISIBLE_DEVICES")
    if value is None:
        return CheckResult(name, Status.PASS, "ASCEND_RT_VISIBLE_DEVICES unset: all devices")
    parts = [p.strip() for p in value.split(",")]
    if not all(p.isdigit() for p in parts):
        return CheckResult(
            name,
            Status.FAIL,
            f"ASCEND_RT_VISIBLE_DEVICES is {value!r}: expected device ids like 0,1,2",
            "set it to comma-separated device ids",
        )
    ids = [int(p) for p in parts]
    if len(set(ids)) != len(ids):
        return CheckResult(
            name,
            Status.FAIL,
            f"ASCEND_RT_VISIBLE_DEVICES {value!r} repeats a device",
            "list each once",
        )
    if info is None:
        return CheckResult(name, Status.WARN, f"{value!r}: no device list to compare with")
    count = len(info.devices)
    missing = [i for i in ids if i >= count]
    if missing:
        return CheckResult(
            name,
            Status.FAIL,
            f"ASCEND_RT_VISIBLE_DEVICES {value!r} names {missing} but only 0..{count - 1} exist",
            f"use ids between 0 and {count - 1}",
        )
    return CheckResult(name, Status.PASS, f"ASCEND_RT_VISIBLE_DEVICES={value}")


def toolkit_env(env: Mapping[str, str]) -> CheckResult:
    """``set_env.sh`` was sourced: ``ASCEND_TOOLKIT_HOME`` set, its lib64 on the loader path."""
    fix = f"source {SET_ENV} before starting the server"
    home = env.get("ASCEND_TOOLKIT_HOME")
    if not home:
        return CheckResult("toolkit_env", Status.FAIL, "ASCEND_TOOLKIT_HOME is not set", fix)
    lib = os.path.normpath(os.path.join(home, "lib64"))
    paths = [os.path.normpath(p) for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    if lib not in paths:
        return CheckResult("toolkit_env", Status.FAIL, f"LD_LIBRARY_PATH lacks {lib}", fix)
    return CheckResult(
        "toolkit_env", Status.PASS, f"ASCEND_TOOLKIT_HOME={home}, {lib} on loader path"
    )


def port_free(port: int) -> CheckResult:
    """The serving port can be bound on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            return CheckResult(
                "port",
                Status.FAIL,
                f"port {port} is taken ({exc.strerror})",
                f"stop what listens on {port} (`ss -ltnp 'sport = :{port}'`) "
                "or serve on another --port",
            )
    return CheckResult("port", Status.PASS, f"port {port} is free")


def disk_space(state_dir: Path) -> CheckResult:
    """Free space on the file system of the state dir (its nearest existing parent)."""
    where = state_dir
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError as exc:
        return CheckResult("disk", Status.WARN, f"cannot stat {where}: {exc}")
    gib = free / (1 << 30)
    if free < MIN_FREE_BYTES:
        return CheckResult(
            "disk",
            Status.WARN,
            f"{gib:.2f} GiB free under {where}",
            "free space or move --state-dir",
        )
    return CheckResult("disk", Status.PASS, f"{gib:.1f} GiB free under {where}")


def hugepages(root: Path) -> CheckResult:
    """Hugepages, when configured, have free pages."""
    path = under(root, MEMINFO)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return CheckResult("hugepages", Status.SKIP, f"{path} not readable")
    values = dict(re.findall(r"^(HugePages_\w+):\s+(\d+)", text, re.MULTILINE))
    total, free = int(values.get("HugePages_Total", 0)), int(values.get("HugePages_Free", 0))
    if total == 0:
        return CheckResult("hugepages", Status.SKIP, "no hugepages configured")
    if free == 0:
        return CheckResult(
            "hugepages", Status.WARN, f"all {total} hugepages in use", "raise vm.nr_hugepages"
        )
    return CheckResult("hugepages", Status.PASS, f"{free} of {total} hugepages free")


# -- the report -------------------------------------------------------------------------------


def run_checks(opts: CheckOptions) -> CheckReport:
    """Run every check in table order."""
    rows: list[CheckResult] = []
    driver_path = under(opts.root, DRIVER_INFO)
    rows.append(
        _version_file(
            "driver", driver_path, "driver", Status.FAIL, "install the Ascend driver (HDK) package"
        )
    )
    rows.append(
        _version_file("firmware", under(opts.root, FIRMWARE_INFO), "firmware", Status.SKIP, "")
    )
    info_path, cann = toolkit_info(opts.root)
    if info_path is None:
        latest = under(opts.root, TOOLKIT_LATEST)
        fix = "install the CANN toolkit (Ascend-cann-toolkit_<version>_linux-<arch>.run)"
        rows.append(CheckResult("cann", Status.FAIL, f"CANN toolkit not found under {latest}", fix))
    elif cann is None:
        rows.append(CheckResult("cann", Status.WARN, f"{info_path} has no version= line"))
    else:
        rows.append(CheckResult("cann", Status.PASS, f"CANN toolkit {cann}"))

    versions, why = probe_python(opts.python)
    if versions is None:
        rows.append(
            CheckResult("python", Status.FAIL, why, "pass the serving interpreter with --python")
        )
    else:
        for pkg in PACKAGES:
            dist = pkg.replace("_", "-")
            version = versions[pkg]
            if version:
                rows.append(CheckResult(f"python.{pkg}", Status.PASS, f"{dist} {version}"))
            else:
                rows.append(
                    CheckResult(
                        f"python.{pkg}",
                        Status.FAIL,
                        f"{dist} is not installed in {opts.python}",
                        f"pip install {dist} (pick the versions of one row of rules/compat.yaml)",
                    )
                )
        rows.extend(compat_checks(load_compat(opts.compat), versions, cann))

    smi_rows, info, smi_found = _npu_smi(opts)
    rows.extend(smi_rows)
    rows.append(visible_devices(opts.env, info))
    rows.append(toolkit_env(opts.env))
    rows.append(port_free(opts.port))
    rows.append(disk_space(opts.state_dir))
    rows.append(hugepages(opts.root))
    found = driver_path.is_file() or info_path is not None or smi_found
    return CheckReport(results=tuple(rows), ascend_found=found)


_STYLE = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.SKIP: "dim"}


def _summary_line(report: CheckReport) -> str:
    return "summary: " + ", ".join(f"{n} {s}" for s, n in report.summary().items())


def render(report: CheckReport) -> None:
    """The table (or, without Ascend software, a few lines saying so) on stdout."""
    if not report.ascend_found:
        click.echo("ascend-doctor check: no Ascend software on this host.")
        for r in report.results:
            if r.name in ("driver", "cann", "npu_smi"):
                click.echo(f"  {r.detail}")
        click.echo(
            f"  install the Ascend driver and CANN toolkit, then `source {SET_ENV}`; "
            "`--json` lists every check."
        )
        click.echo(_summary_line(report))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for column in ("check", "status", "detail", "fix"):
        table.add_column(column, overflow="fold")  # fold, never cut a path or a version
    for r in report.results:
        table.add_row(r.name, f"[{_STYLE[r.status]}]{r.status.value}[/]", r.detail, r.fix)
    console = Console(soft_wrap=False)
    console.print(table)
    console.print(_summary_line(report), highlight=False)


@click.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print the rows and a summary as JSON.")
@click.option(
    "--python",
    "python",
    default=sys.executable,
    show_default="the current interpreter",
    help="Interpreter of the serving environment (torch, torch_npu, vllm, vllm-ascend).",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("/"),
    help="Prefix of every host path read (driver, toolkit, /proc/meminfo).",
)
@click.option("--npu-smi", "npu_smi", default=None, help="npu-smi binary (default: from PATH).")
@click.option("--port", type=int, default=8000, show_default=True, help="Serving port to check.")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where logs go; its disk needs 1 GiB free (default: the doctor's state dir).",
)
def check(
    as_json: bool,
    python: str,
    root: Path,
    npu_smi: str | None,
    port: int,
    state_dir: Path | None,
) -> None:
    """Preflight: driver, CANN, torch/torch_npu/vLLM versions, devices, env, port, disk."""
    opts = CheckOptions(
        root=root,
        python=python,
        npu_smi=npu_smi,
        port=port,
        state_dir=state_dir if state_dir is not None else default_state_dir(),
    )
    try:
        report = run_checks(opts)
    except DoctorError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        render(report)
    click.get_current_context().exit(1 if report.failed else 0)


__all__ = [
    "CheckOptions",
    "CheckReport",
    "CheckResult",
    "CompatRow",
    "Status",
    "cann_key",
    "check",
    "compat_checks",
    "find_row",
    "load_compat",
    "probe_python",
    "release",
    "run_checks",
]
