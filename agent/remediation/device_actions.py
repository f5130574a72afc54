"""Remediation actions on the host and the device: a diagnostics snapshot, a profile, a
restart, a device reset. No shell, and no log text ever reaches a command line: the only
value taken from the evidence is a device number parsed as an integer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ascend_doctor.agent.remediation.context import Context, Done, Evidence
from ascend_doctor.agent.remediation.launch_actions import to_int
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.events import Incident, Outcome
from ascend_doctor.core.records import encode

log = logging.getLogger(__name__)

TAIL_BYTES = 64 << 10
"""How much of each log a diagnostics snapshot keeps."""


async def collect_diagnostics(
    ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence
) -> Done:
    """Snapshot npu-smi output and the log tails into the incident's evidence directory."""
    from ascend_doctor.collectors.npu_smi import run_npu_smi

    if ctx.host.diagnostics_dir is None:
        return Done(Outcome.REFUSED, "no diagnostics directory configured")
    out = ctx.host.diagnostics_dir / f"incident-{inc.id}-{int(ctx.clock())}"
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    binary = ctx.npu_smi()
    try:
        res = await run_npu_smi(binary, ["info"], timeout=ctx.host.npu_smi_timeout)
        (out / "npu-smi-info.txt").write_text(res.stdout + res.stderr, encoding="utf-8")
        files.append("npu-smi-info.txt")
    except CollectorError as exc:
        (out / "npu-smi-info.txt").write_text(f"npu-smi failed: {exc}\n", encoding="utf-8")
    for n, path in enumerate(ctx.host.log_paths()):
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - TAIL_BYTES))
                tail = f.read()
        except OSError:
            continue
        name = f"tail-{n}-{Path(path).name}"
        (out / name).write_bytes(tail)
        files.append(name)
    return Done(Outcome.OK, f"snapshot in {out}", {"dir": str(out), "files": files})


async def capture_profile(
    ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence
) -> Done:
    """Record a profile of the live server before it is restarted (optional: a refusal
    does not stop the rest of the step)."""
    if ctx.host.profile is None or not ctx.server.running():
        return Done(Outcome.REFUSED, "no running server with a profiler to capture")
    try:
        artifact = await ctx.host.profile()
    except Exception as exc:
        return Done(Outcome.FAILED, f"profile not captured: {exc}")
    return Done(Outcome.OK, f"profile recorded in {artifact.path}", encode(artifact))


async def restart(ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence) -> Done:
    """Restart the server with the launch spec as it now stands."""
    return Done(Outcome.OK, "restart the server", {}, restart=True)


def failed_device(
    ctx: Context, inc: Incident, params: Mapping[str, Any], ev: Evidence
) -> int | None:
    """The device a reset is for: the step's ``device`` parameter, else the evidence, else the
    incident's subject (``npu3``), else the server's only device; None when nothing says."""
    device = to_int(params.get("device")) if "device" in params else None
    if device is None:
        device = to_int(ev.captures.get("device"))
    if device is None and inc.subject.startswith("npu"):
        device = to_int(inc.subject[3:].split(".")[0])
    if device is None:
        devices = ctx.devices()
        device = devices[0] if len(devices) == 1 else None
    return device


def reset_command(device: int | None, chip: int = 0) -> list[str]:
    """The npu-smi command that resets a device (``N`` where the device is not known)."""
    return [
        "npu-smi",
        "set",
        "-t",
        "reset",
        "-i",
        "N" if device is None else str(device),
        "-c",
        str(chip),
    ]


async def reset_device(ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence) -> Done:
    """``npu-smi set -t reset -i N -c 0`` on this server's faulty device, then check its health."""
    from ascend_doctor.collectors.npu_smi import parse_info, parse_pairs, run_npu_smi

    devices = ctx.devices()
    device = failed_device(ctx, inc, params, ev)
    if device is None:
        return Done(Outcome.REFUSED, "the evidence does not say which device failed")
    chip = 0
    p: dict[str, Any] = {"device": device, "chip": chip}
    if not ctx.config.allow_device_reset:
        return Done(
            Outcome.REFUSED,
            "device resets are not allowed (remediation.allow_device_reset = false)",
            p,
        )
    if device not in devices:
        return Done(Outcome.REFUSED, f"device {device} is not used by this server ({devices})", p)
    binary = ctx.npu_smi()
    if ctx.server.running():
        await ctx.server.stop(f"stopping the server to reset device {device}")
    try:
        info_run = await run_npu_smi(binary, ["info"], timeout=ctx.host.npu_smi_timeout)
        info = parse_info(info_run.stdout)
    except CollectorError as exc:
        return Done(Outcome.FAILED, f"cannot read the process table before a reset: {exc}", p)
    holders = [pr for pr in info.processes_on(device) if pr.pid not in ctx.server.own_pids]
    if holders:
        pids = ", ".join(f"pid {h.pid} ({h.name})" for h in holders)
        p["holders"] = [h.pid for h in holders]
        return Done(Outcome.REFUSED, f"reset refused: {pids} holds device {device}", p)
    p["command"] = reset_command(device, chip)
    argv = p["command"][1:]
    try:
        res = await run_npu_smi(binary, argv, timeout=ctx.config.command_timeout)
    except CollectorError as exc:
        return Done(Outcome.FAILED, str(exc), p)
    p["output"] = (res.stdout + res.stderr).strip()[-500:]
    if res.timed_out:
        return Done(
            Outcome.UNKNOWN, f"npu-smi reset did not finish in {ctx.config.command_timeout:.0f}s", p
        )
    if res.returncode != 0:
        return Done(Outcome.FAILED, f"npu-smi reset exited with status {res.returncode}", p)
    await ctx.sleep(ctx.config.reset_settle)
    health_run = await run_npu_smi(
        binary,
        ["info", "-t", "health", "-i", str(device), "-c", str(chip)],
        timeout=ctx.host.npu_smi_timeout,
    )
    health = parse_pairs(health_run.stdout).get("Health Status", "unknown")
    p["health_after"] = health
    if health != "OK":
        return Done(Outcome.FAILED, f"device {device} health is {health} after the reset", p)
    return Done(
        Outcome.OK,
        f"device {device} reset; health OK after {ctx.config.reset_settle:g}s",
        p,
        restart=True,
    )


__all__ = [
    "capture_profile",
    "collect_diagnostics",
    "failed_device",
    "reset_command",
    "reset_device",
    "restart",
]
