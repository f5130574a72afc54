"""Remediation actions on the host and the device: a diagnostics snapshot, a profile, a
restart, a device reset. No shell, and no log text ever reaches a command line: the only
value taken from the evidence is a device number parsed as an integer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ascend_doctor.agent.remediation.context import Context, Done, Evidence
from ascend_doctor.agent.remediation.launch_actions import to_int
from ascend_doctor.collectors.npu_smi import reset_command
from ascend_doctor.core.errors import CollectorError, RemediationError
from ascend_doctor.core.events import Incident, Outcome
from ascend_doctor.core.procs import descendants, is_own, pid_alive
from ascend_doctor.core.records import encode

log = logging.getLogger(__name__)


async def collect_diagnostics(
    ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence
) -> Done:
    """Keep the evidence of the live server (stacks, npu-smi health and ECC, log tails, the
    last metrics: ``collectors/evidence.py``) in a snapshot indexed on the incident."""
    if ctx.host.evidence is None:
        return Done(Outcome.REFUSED, "no diagnostics directory configured")
    index = await ctx.host.evidence.take(f"incident-{inc.id}", f"incident {inc.id}: {inc.summary}")
    files = [f.name for f in index.files]
    stacks = sum(1 for f in index.files if f.kind == "stacks")
    return Done(
        Outcome.OK,
        f"snapshot in {index.dir} ({stacks} process stacks by {index.stacks_by})",
        {"dir": index.dir, "files": files, "stacks_by": index.stacks_by, "pids": index.pids},
    )


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
    said = f": {artifact.analysis.headline}" if artifact.analysis is not None else ""
    return Done(Outcome.OK, f"profile recorded in {artifact.path}{said}", encode(artifact))


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


HOLDER_POLL_S = 0.5
"""How often the process table is read while the server's own processes let go of the cards."""


def _pids(procs: list[Any]) -> str:
    return ", ".join(f"pid {h.pid} ({h.name}) holds device {h.npu}" for h in procs)


async def reset_device(ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence) -> Done:
    """``npu-smi set -t reset -i N -c 0`` on this server's faulty device, then check its health.

    On an Atlas 800T A2 npu-smi resets every NPU of the board (HCCS joins them) after asking
    twice; the doctor assumes that scope, answers yes only when every NPU is idle or held by
    the server's own processes (waiting, up to ``command_timeout``, for its own processes to let
    go: a process stuck in the driver keeps its card after the server stopped), and refuses
    when another job holds any of them.
    """
    from ascend_doctor.collectors.npu_smi import (
        CHIP_RESET_ANSWERS,
        RESET_ANSWERS,
        parse_info,
        parse_pairs,
        parse_reset,
        run_npu_smi,
    )

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
    own = set(ctx.server.own_pids)
    if ctx.server.running():
        pid = ctx.server.pid
        own.update(descendants(pid) if pid is not None else [])
        try:
            await ctx.server.stop(f"stopping the server to reset device {device}")
        except RemediationError as exc:  # another server must keep serving (agent/fleet.py)
            return Done(Outcome.REFUSED, f"reset refused: {exc}", p)
    deadline = ctx.clock() + ctx.config.command_timeout
    while True:
        try:
            info_run = await run_npu_smi(binary, ["info"], timeout=ctx.host.npu_smi_timeout)
            info = parse_info(info_run.stdout)
        except CollectorError as exc:
            return Done(Outcome.FAILED, f"cannot read the process table before a reset: {exc}", p)
        chip_only = ctx.config.reset_scope == "chip"
        scope = [device] if chip_only else sorted({d.npu for d in info.devices} | {device})
        held = [pr for pr in info.processes if pr.npu in scope]
        foreign = [pr for pr in held if pid_alive(pr.pid) and not is_own(pr.pid, own)]
        if foreign:
            p["holders"] = [h.pid for h in foreign]
            on_it = [h for h in foreign if h.npu == device]
            if on_it:
                return Done(Outcome.REFUSED, f"reset refused: {_pids(on_it)}", p)
            return Done(
                Outcome.REFUSED,
                "reset refused: npu-smi resets every NPU of this board at once (HCCS) and "
                + _pids(foreign),
                p,
            )
        if not held:
            break
        if ctx.clock() >= deadline:
            p["holders"] = [h.pid for h in held]
            return Done(
                Outcome.FAILED,
                f"this server's {_pids(held)} {ctx.config.command_timeout:.0f}s after it was "
                "stopped (stuck in the driver?)",
                p,
            )
        await ctx.sleep(HOLDER_POLL_S)
    p["scope"] = scope
    p["command"] = reset_command(device, chip)
    try:
        res = await run_npu_smi(
            binary,
            p["command"][1:],
            timeout=ctx.config.command_timeout,
            answers=CHIP_RESET_ANSWERS if chip_only else RESET_ANSWERS,
        )
    except CollectorError as exc:
        return Done(Outcome.FAILED, str(exc), p)
    p["output"] = (res.stdout + res.stderr).strip()[-500:]
    if res.timed_out:
        return Done(
            Outcome.UNKNOWN, f"npu-smi reset did not finish in {ctx.config.command_timeout:.0f}s", p
        )
    result = parse_reset(res.stdout)
    if res.returncode != 0 or result.status != "OK":
        said = result.message or "no result line"
        return Done(
            Outcome.FAILED, f"npu-smi reset failed: {said} (exit status {res.returncode})", p
        )
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
