"""Remediation actions that change how the server is launched. Each returns its decision and
the override to store; the remediator applies it and restarts. No log text ever reaches a
command line: only numbers parsed from captures do.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ascend_doctor.agent.remediation.context import Context, Done, Evidence
from ascend_doctor.core.events import Incident, Outcome

DEFAULT_BLOCK_SIZE = 128  # vLLM-Ascend's default --block-size
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_MAX_NUM_SEQS = 256
MIN_MAX_NUM_SEQS = 8
ALLOC_CONF = "PYTORCH_NPU_ALLOC_CONF"
HCCL_TIMEOUTS = {"HCCL_CONNECT_TIMEOUT": (120, 1800), "HCCL_EXEC_TIMEOUT": (1836, 7200)}
"""HCCL timeout variables: (default, ceiling) in seconds."""

Action = Callable[[Context, Incident, dict[str, Any], Evidence], Awaitable[Done]]
"""An action: what it decided, given the context, the incident, its params and evidence."""


def to_int(text: str | None) -> int | None:
    """A number as captured (``16,384`` too); None when it is not one."""
    try:
        return int(str(text).replace(",", "")) if text is not None else None
    except ValueError:
        return None


async def lower_max_model_len(
    ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence
) -> Done:
    """Lower --max-model-len to what the evidence says fits, rounded down to the block size."""
    spec = ctx.spec()
    current = to_int(spec.flag("--max-model-len")) or to_int(ev.captures.get("max_model_len"))
    block = to_int(spec.flag("--block-size")) or DEFAULT_BLOCK_SIZE
    fits = to_int(ev.captures.get("estimate"))
    source = "vLLM's estimated maximum model length"
    if fits is None:
        fits = to_int(ev.captures.get("kv_tokens"))
        source = "the KV cache size in tokens"
    if fits is None:
        fits = _fits_from_memory(ev.captures)
        source = "the available KV cache memory over the model's KV bytes per token"
    if fits is None and params.get("halve") and current:
        fits, source = current // 2, "half the current length (host memory, not the KV cache)"
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
    current = to_int(ctx.spec().flag("--max-num-seqs")) or DEFAULT_MAX_NUM_SEQS
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


async def lower_swap_space(
    ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence
) -> Done:
    """Halve --swap-space (host memory vLLM pins per device for swapped-out KV blocks); only
    when the launch sets it: never more swap, and no flag a vLLM release may not know."""
    current = to_int(ctx.spec().flag("--swap-space"))
    if not current:
        return Done(Outcome.REFUSED, "--swap-space is not set (or 0): nothing to lower")
    p = {"from": current, "to": current // 2}
    override = ("--swap-space", "arg", str(current // 2))
    return Done(Outcome.OK, "pin less host memory", p, restart=True, override=override)


async def set_env(ctx: Context, inc: Incident, params: dict[str, Any], ev: Evidence) -> Done:
    """Set an environment variable of the server (e.g. the allocator's expandable segments)."""
    name, value = str(params.get("name", "")), str(params.get("value", ""))
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
        return Done(Outcome.REFUSED, f"invalid environment variable name {name!r}")
    current = ctx.spec().getenv(name, ctx.server.base_env)
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
    current = to_int(ctx.spec().getenv(name, ctx.server.base_env)) or default
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


__all__ = [
    "ALLOC_CONF",
    "HCCL_TIMEOUTS",
    "Action",
    "enforce_eager",
    "lower_gpu_memory_utilization",
    "lower_max_model_len",
    "lower_max_num_seqs",
    "lower_swap_space",
    "raise_hccl_timeout",
    "set_env",
    "to_int",
]
