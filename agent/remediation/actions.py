"""Remediation actions. Each takes the context and the incident's evidence and returns
an ActionResult; launch changes become stored overrides. No shell, and no log text
ever reaches a command line: only integers parsed from captures do (device ids).
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascend_doctor.agent.launch import LaunchSpec
from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.events import Incident, Outcome
from ascend_doctor.core.store import Store

log = logging.getLogger(__name__)

DEFAULT_BLOCK_SIZE = 128  # vLLM-Ascend's default --block-size
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_MAX_NUM_SEQS = 256
MIN_MAX_NUM_SEQS = 8
ALLOC_CONF = "PYTORCH_NPU_ALLOC_CONF"
HCCL_TIMEOUTS = {"HCCL_CONNECT_TIMEOUT": (120, 1800), "HCCL_EXEC_TIMEOUT": (1836, 7200)}
"""HCCL timeout variables: (default, ceiling) in seconds."""
TAIL_BYTES = 64 << 10


@dataclass
class Context:
    """What actions may look at and act on."""

    config: RemediationConfig
    """The remediation policy."""
    store: Store
    """Where overrides and decisions go."""
    spec: Callable[[], LaunchSpec]
    """The server's effective launch spec (base + overrides)."""
    base_env: Mapping[str, str]
    """The environment the server inherits."""
    npu_smi: str
    """The npu-smi binary."""
    npu_smi_timeout: float
    """Timeout of read-only npu-smi calls."""
    server_running: Callable[[], bool]
    """Whether the server process exists."""
    stop_server: Callable[[str], Awaitable[None]]
    """Stop the server (and keep it stopped)."""
    sleep: Callable[[float], Awaitable[None]]
    """Injectable wait."""
    clock: Callable[[], float]
    """Wall clock."""
    own_pids: set[int] = field(default_factory=set)
    """PIDs this server has had (not foreign holders of a device)."""
    supervised: bool = True
    """False when the doctor only observes: it cannot change or restart the server."""
    attached: bool = False
    """Attach mode: the server is someone else's; launch changes are suggested."""
    can_restart: bool = False
    """Attach mode with a restart command: ``restart`` runs it."""
    profile_capture: Callable[[], Awaitable[dict[str, Any]]] | None = None
    """Records a profile of the running server; None when profiling is not set up."""
    diagnostics_dir: Path | None = None
    """Where collect_diagnostics writes its snapshots (None: do not write)."""
    log_paths: Callable[[], list[str]] = field(default_factory=lambda: list)
    """The logs worth a tail in a diagnostics snapshot."""


@dataclass(frozen=True)
class Evidence:
    """What the incident's findings captured."""

    captures: dict[str, str]
    """Merged captures, the root finding's winning."""


@dataclass(frozen=True)
class Done:
    """An action's outcome before it is stamped and recorded."""

    outcome: Outcome
    reason: str
    params: dict[str, Any] = field(default_factory=dict)
    restart: bool = False  # the server must be (re)started for this to take effect
    override: tuple[str, str, str] | None = None  # (key, kind, value) to store


Action = Callable[[Context, Incident, dict[str, Any], Evidence], Awaitable[Done]]


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).replace(",", "")) if text is not None else None
    except ValueError:
        return None


async def lower_max_model_len(
    ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence
) -> Done:
    """Lower --max-model-len to what the evidence says fits, rounded down to the block size."""
    spec = ctx.spec()
    current = _int(spec.flag("--max-model-len")) or _int(ev.captures.get("max_model_len"))
    block = _int(spec.flag("--block-size")) or DEFAULT_BLOCK_SIZE
    fits = _int(ev.captures.get("estimate"))
    source = "vLLM's estimated maximum model length"
    if fits is None:
        fits = _int(ev.captures.get("kv_tokens"))
        source = "the KV cache size in tokens"
    if fits is None:
        fits = _fits_from_memory(ev.captures)
        source = "the available KV cache memory over the model's KV bytes per token"
    if fits is None:
        return Done(Outcome.REFUSED, "no evidence of what fits (no estimate, no KV token count)")
    target = fits // block * block
    p = {"from": current, "to": target, "fits": fits, "block_size": block, "evidence": source}
    floor = ctx.config.min_max_model_len
    if target < floor:
        return Done(Outcome.REFUSED, f"{target} would be below the floor {floor}", p)
    if current is not None and target >= current:
        return Done(Outcome.REFUSED, f"{target} is not lower than the current {current}", p)
    why = f"{source} is {fits}; {target} is the largest multiple of block size {block}"
    return Done(Outcome.OK, why, p, restart=True, override=("--max-model-len", "arg", str(target)))


def _fits_from_memory(captures: Mapping[str, str]) -> int | None:
    """Tokens the available KV memory holds, from what one request of ``max_model_len``
    tokens needs (vLLM messages without the estimate): per-token size = needed / length."""
    try:
        length = int(captures["max_model_len"])
        needed = float(captures["needed_gib"])
        available = float(captures["available_gib"])
    except (KeyError, ValueError):
        return None
    if length <= 0 or needed <= 0 or available <= 0:
        return None
    return int(length * available / needed)


async def lower_gpu_memory_utilization(
    ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence
) -> Done:
    """Lower --gpu-memory-utilization by the configured step, never below the floor."""
    spec = ctx.spec()
    try:
        current = float(spec.flag("--gpu-memory-utilization") or DEFAULT_GPU_MEMORY_UTILIZATION)
    except ValueError:
        return Done(Outcome.REFUSED, "the current --gpu-memory-utilization is not a number")
    step = float(params.get("step", ctx.config.gpu_memory_utilization_step))
    target = round(current - step, 2)
    floor = ctx.config.min_gpu_memory_utilization
    p = {"from": current, "to": target}
    if target < floor:
        return Done(Outcome.REFUSED, f"{target} would be below the floor {floor}", p)
    why = f"leave {step:.2f} more of the card's memory outside vLLM's pool"
    return Done(
        Outcome.OK,
        why,
        p,
        restart=True,
        override=("--gpu-memory-utilization", "arg", f"{target:g}"),
    )


async def lower_max_num_seqs(
    ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence
) -> Done:
    """Halve --max-num-seqs (fewer sequences at once need less activation memory)."""
    current = _int(ctx.spec().flag("--max-num-seqs")) or DEFAULT_MAX_NUM_SEQS
    target = max(MIN_MAX_NUM_SEQS, current // 2)
    p = {"from": current, "to": target}
    if target >= current:
        return Done(Outcome.REFUSED, f"--max-num-seqs {current} is already at the floor", p)
    return Done(
        Outcome.OK,
        "serve fewer sequences at once",
        p,
        restart=True,
        override=("--max-num-seqs", "arg", str(target)),
    )


async def set_env(ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence) -> Done:
    """Set an environment variable of the server (e.g. the allocator's expandable segments)."""
    name, value = str(params.get("name", "")), str(params.get("value", ""))
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
        return Done(Outcome.REFUSED, f"invalid environment variable name {name!r}")
    current = ctx.spec().getenv(name, ctx.base_env)
    p = {"name": name, "value": value, "from": current}
    if current == value:
        return Done(Outcome.OK, f"{name} is already {value}", p)
    if name == ALLOC_CONF and current and "expandable_segments" not in current:
        return Done(
            Outcome.REFUSED,
            f"the server already sets {name}={current}, which may not combine with {value}",
            p,
        )
    return Done(Outcome.OK, f"set {name}={value}", p, restart=True, override=(name, "env", value))


async def enforce_eager(ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence) -> Done:
    """Run without ACL graph capture (--enforce-eager): slower, but nothing to capture."""
    if ctx.spec().has_flag("--enforce-eager"):
        return Done(Outcome.REFUSED, "the server already runs with --enforce-eager")
    return Done(
        Outcome.OK,
        "run eagerly: no graph capture",
        {"flag": "--enforce-eager"},
        restart=True,
        override=("--enforce-eager", "flag", ""),
    )


async def raise_hccl_timeout(
    ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence
) -> Done:
    """Double HCCL_CONNECT_TIMEOUT (up to a ceiling), only for a collective timeout."""
    if inc.category.value != "hccl_timeout":
        return Done(Outcome.REFUSED, "no evidence of slow ranks (not a collective timeout)")
    name = str(params.get("name", "HCCL_CONNECT_TIMEOUT"))
    if name not in HCCL_TIMEOUTS:
        return Done(Outcome.REFUSED, f"{name} is not an HCCL timeout variable")
    default, ceiling = HCCL_TIMEOUTS[name]
    current = _int(ctx.spec().getenv(name, ctx.base_env)) or default
    target = min(ceiling, current * 2)
    p = {"name": name, "from": current, "to": target}
    if target <= current:
        return Done(Outcome.REFUSED, f"{name} is already at its ceiling {ceiling}s", p)
    return Done(
        Outcome.OK,
        f"give slow ranks longer: {name}={target}",
        p,
        restart=True,
        override=(name, "env", str(target)),
    )


async def collect_diagnostics(
    ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence
) -> Done:
    """Snapshot npu-smi output and the log tails into the incident's evidence directory."""
    from ascend_doctor.collectors.npu_smi import run_npu_smi

    if ctx.diagnostics_dir is None:
        return Done(Outcome.REFUSED, "no diagnostics directory configured")
    out = ctx.diagnostics_dir / f"incident-{inc.id}-{int(ctx.clock())}"
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    binary = shutil.which(ctx.npu_smi, path=ctx.base_env.get("PATH")) or ctx.npu_smi
    try:
        res = await run_npu_smi(binary, ["info"], timeout=ctx.npu_smi_timeout)
        (out / "npu-smi-info.txt").write_text(res.stdout + res.stderr, encoding="utf-8")
        files.append("npu-smi-info.txt")
    except CollectorError as exc:
        (out / "npu-smi-info.txt").write_text(f"npu-smi failed: {exc}\n", encoding="utf-8")
    for n, path in enumerate(ctx.log_paths()):
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
    if ctx.profile_capture is None or not ctx.server_running():
        return Done(Outcome.REFUSED, "no running server with a profiler to capture")
    try:
        artifact = await ctx.profile_capture()
    except Exception as exc:
        return Done(Outcome.FAILED, f"profile not captured: {exc}")
    return Done(Outcome.OK, f"profile recorded in {artifact.get('path')}", artifact)


async def restart(ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence) -> Done:
    """Restart the server with the launch spec as it now stands."""
    return Done(Outcome.OK, "restart the server", {}, restart=True)


def failed_device(
    ctx: Context, inc: Incident, params: Mapping[str, Any], ev: Evidence
) -> int | None:
    """The device a reset is for: the step's ``device`` parameter, else the evidence, else the
    incident's subject (``npu3``), else the server's only device; None when nothing says."""
    device = _int(params.get("device")) if "device" in params else None
    if device is None:
        device = _int(ev.captures.get("device"))
    if device is None and inc.subject.startswith("npu"):
        device = _int(inc.subject[3:].split(".")[0])
    if device is None:
        devices = ctx.spec().devices(ctx.base_env)
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

    spec = ctx.spec()
    devices = spec.devices(ctx.base_env)
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
    binary = shutil.which(ctx.npu_smi, path=ctx.base_env.get("PATH")) or ctx.npu_smi
    if ctx.server_running():
        await ctx.stop_server(f"stopping the server to reset device {device}")
    try:
        info_run = await run_npu_smi(binary, ["info"], timeout=ctx.npu_smi_timeout)
        info = parse_info(info_run.stdout)
    except CollectorError as exc:
        return Done(Outcome.FAILED, f"cannot read the process table before a reset: {exc}", p)
    holders = [pr for pr in info.processes_on(device) if pr.pid not in ctx.own_pids]
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
        timeout=ctx.npu_smi_timeout,
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


ACTS_ON_SERVER = frozenset(
    {
        "lower_max_model_len",
        "lower_gpu_memory_utilization",
        "lower_max_num_seqs",
        "set_env",
        "restart",
        "reset_device",
        "enforce_eager",
        "raise_hccl_timeout",
    }
)
"""Actions that change, stop or restart the server: only for a supervised server."""

CHANGES_LAUNCH = frozenset(
    {
        "lower_max_model_len",
        "lower_gpu_memory_utilization",
        "lower_max_num_seqs",
        "set_env",
        "enforce_eager",
        "raise_hccl_timeout",
    }
)
"""Actions whose effect is a changed launch command (an override)."""

OPTIONAL = frozenset({"collect_diagnostics", "capture_profile"})
"""Actions whose refusal or failure does not stop the rest of their step."""

ACTIONS: dict[str, Action] = {
    "lower_max_model_len": lower_max_model_len,
    "lower_gpu_memory_utilization": lower_gpu_memory_utilization,
    "lower_max_num_seqs": lower_max_num_seqs,
    "set_env": set_env,
    "restart": restart,
    "reset_device": reset_device,
    "enforce_eager": enforce_eager,
    "raise_hccl_timeout": raise_hccl_timeout,
    "collect_diagnostics": collect_diagnostics,
    "capture_profile": capture_profile,
}
"""Every action by name; rules name these."""


def describe_override(key: str, kind: str, value: str) -> str:
    """An override as an operator types it: ``--max-model-len 16384``, ``--enforce-eager``,
    ``PYTORCH_NPU_ALLOC_CONF=expandable_segments:True``."""
    if kind == "flag":
        return key
    if kind == "env":
        return f"{key}={value}"
    return f"{key} {value}"


__all__ = [
    "ACTIONS",
    "ACTS_ON_SERVER",
    "CHANGES_LAUNCH",
    "OPTIONAL",
    "Action",
    "Context",
    "Done",
    "Evidence",
    "describe_override",
    "failed_device",
    "reset_command",
]
