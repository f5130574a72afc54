"""Command line of the fake ``vllm``: a real argparse tree shaped like vLLM's, per release.

vLLM parses ``vllm serve`` with a top-level ``FlexibleArgumentParser`` (prog ``vllm``) and a
``serve`` subparser; an unknown flag makes the top-level parser exit 2 with
``usage: vllm [-h] [-v] {chat,...} ...`` and ``vllm: error: unrecognized arguments: ...``
(vllm/entrypoints/cli/main.py; vllm-project/vllm#22072, vllm-omni#1364). The simulated flag
table is the part of ``vllm serve``'s flags an operator (and the doctor) passes; the release
profile removes or adds flags as each release did (sim/SOURCES.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ascend_doctor.sim.engine_core import ServeConfig
from ascend_doctor.sim.models import get_profile
from ascend_doctor.sim.versions import VersionProfile

_DEFAULTS: dict[str, Any] = {
    "host": None,
    "port": 8000,
    "max_model_len": None,
    "gpu_memory_utilization": 0.9,
    "max_num_seqs": 256,
    "enforce_eager": False,
    "block_size": 128,
    "tensor_parallel_size": 1,
    "served_model_name": None,
    "distributed_executor_backend": None,
    "enable_log_requests": False,
    "disable_log_stats": False,
}


def human_readable_int(value: str) -> int:
    """vLLM's parser of ``--max-model-len``: ``32k`` is 32,000, ``32K`` is 32,768.

    vllm/engine/arg_utils.py ``human_readable_int`` (v0.11.0); ``t``/``T`` only from 0.18."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9}
        binary = {"K": 2**10, "M": 2**20, "G": 2**30}
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        if suffix in binary:
            try:
                return int(number) * binary[suffix]
            except ValueError:
                raise argparse.ArgumentTypeError(
                    "Decimals are not allowed with binary suffixes like "
                    f"{suffix}. Did you mean to use {number}{suffix.lower()} instead?"
                ) from None
    return int(value)


def _human_readable_int_v18(value: str) -> int:
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([tT])", value)
    if match:
        number, suffix = match.groups()
        if suffix == "t":
            return int(float(number) * 10**12)
        return int(number) * 2**40
    return human_readable_int(value)


def human_readable_int_or_auto(value: str) -> int:
    """0.18+: ``-1`` or ``auto`` means "derive from the model" (returned as -1)."""
    if value.strip() == "-1" or value.strip().lower() == "auto":
        return -1
    return _human_readable_int_v18(value)


human_readable_int.__name__ = "human_readable_int"
human_readable_int_or_auto.__name__ = "human_readable_int_or_auto"


def _profiler_config(value: str) -> dict[str, Any]:
    # vLLM validates the JSON into ProfilerConfig; argparse turns the ValueError into exit 2.
    data = json.loads(value)
    if not isinstance(data, dict):
        raise ValueError("profiler config must be a JSON object")
    return data


_profiler_config.__name__ = "loads"

_Flag = tuple[tuple[str, ...], dict[str, Any]]


def _flag_table(version: VersionProfile) -> list[_Flag]:
    bool_opt = argparse.BooleanOptionalAction
    max_len_type: Callable[[str], int] = (
        human_readable_int_or_auto if version.line not in ("0.11", "0.13") else human_readable_int
    )
    return [
        (("--host",), {}),
        (("--port",), {"type": int}),
        (("--api-key",), {"nargs": "+"}),
        (("--uvicorn-log-level",), {}),
        (("--max-log-len",), {"type": int}),
        (("--max-model-len",), {"type": max_len_type}),
        (("--gpu-memory-utilization",), {"type": float}),
        (("--max-num-seqs",), {"type": int}),
        (("--max-num-batched-tokens",), {"type": human_readable_int}),
        (("--enforce-eager",), {"action": bool_opt}),
        (("--block-size",), {"type": int}),
        (("--swap-space",), {"type": float}),
        (("--kv-cache-dtype",), {}),
        (("--dtype",), {}),
        (("--seed",), {"type": int}),
        (("--trust-remote-code",), {"action": bool_opt}),
        (("--tensor-parallel-size", "-tp"), {"type": int}),
        (("--pipeline-parallel-size", "-pp"), {"type": int}),
        (("--data-parallel-size", "-dp"), {"type": int}),
        (("--enable-expert-parallel",), {"action": bool_opt}),
        (
            ("--distributed-executor-backend",),
            {"choices": ["ray", "mp", "uni", "external_launcher"]},
        ),
        (("--served-model-name",), {"nargs": "+"}),
        (("--quantization", "-q"), {}),
        (("--load-format",), {}),
        (("--enable-prefix-caching",), {"action": bool_opt}),
        (("--compilation-config", "-O"), {}),
        (("--additional-config",), {}),
        (("--generation-config",), {}),
        (("--kv-transfer-config",), {}),
        (("--show-hidden-metrics-for-version",), {}),
        (("--otlp-traces-endpoint",), {}),
        (("--profiler-config",), {"type": _profiler_config}),
        (("--enable-log-requests",), {"action": bool_opt}),
        (("--disable-log-requests",), {"action": bool_opt}),
        (("--disable-log-stats",), {"action": "store_true"}),
    ]


def build_parser(version: VersionProfile) -> argparse.ArgumentParser:
    """The ``vllm`` parser of ``version``: top level, subcommands, and ``serve``'s flags."""
    parser = argparse.ArgumentParser(prog="vllm", description="vLLM CLI")
    parser.add_argument("-v", "--version", action="version", version=version.vllm)
    sub = parser.add_subparsers(required=False, dest="subparser")
    serve = None
    for name in version.subcommands:
        p = sub.add_parser(name, usage=f"vllm {name} [model_tag] [options]")
        if name == "serve":
            serve = p
    assert serve is not None
    serve.add_argument("model_tag", nargs="?")
    for names, kwargs in _flag_table(version):
        if version.has_flag(names[0]):
            serve.add_argument(*names, default=None, **kwargs)
    return parser


def parse_args(argv: list[str], version: VersionProfile) -> argparse.Namespace:
    """Parse ``serve MODEL [flags]`` strictly; argparse exits 2 on anything unknown."""
    # vLLM accepts --flag_name for --flag-name (FlexibleArgumentParser.parse_args).
    norm = [
        re.sub(r"^(--[^=.]*)", lambda m: m.group(1).replace("_", "-"), a)
        if a.startswith("--")
        else a
        for a in argv
    ]
    parser = build_parser(version)
    ns = parser.parse_args(norm)
    if ns.subparser != "serve":
        parser.error("the simulated vllm only implements `vllm serve`")
    if ns.model_tag is None:
        parser.error("the following arguments are required: model_tag")
    return ns


def profiler_dir(ns: argparse.Namespace, version: VersionProfile) -> Path | None:
    """Where torch traces go, the way this release decides it (None: profiling off, 404).

    0.11 reads only ``VLLM_TORCH_PROFILER_DIR``; 0.13 takes ``--profiler-config`` and still the
    env var (deprecated); 0.18+ only ``--profiler-config`` (vllm/config/profiler.py)."""
    cfg: dict[str, Any] | None = getattr(ns, "profiler_config", None)
    if cfg is not None and cfg.get("profiler") == "torch" and cfg.get("torch_profiler_dir"):
        return Path(os.path.expanduser(str(cfg["torch_profiler_dir"]))).absolute()
    env = os.environ.get("VLLM_TORCH_PROFILER_DIR")
    if env and version.profiler_env and cfg is None:
        return Path(os.path.expanduser(env)).absolute()
    return None


def dynamic_profiling() -> bool:
    """True when started with ``PROFILING_MODE=dynamic`` (msprof may attach)."""
    return os.environ.get("PROFILING_MODE", "").strip().lower() == "dynamic"


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) else value


def build_config(ns: argparse.Namespace, version: VersionProfile) -> ServeConfig:
    """Resolve defaults, env and the model profile into the effective config."""
    given = {k: _first(getattr(ns, k, None)) for k in _DEFAULTS}
    given = {k: v for k, v in given.items() if v is not None}
    v = {**_DEFAULTS, "gpu_memory_utilization": version.gpu_util_default, **given}
    profile = get_profile(ns.model_tag)
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "0")
    devices = [int(d) for d in visible.split(",") if d.strip().isdigit()]
    alloc = os.environ.get("PYTORCH_NPU_ALLOC_CONF", "")
    expandable = any(
        item.strip().lower() == "expandable_segments:true" for item in alloc.split(",")
    )
    max_len = v["max_model_len"]
    if max_len is None or max_len == -1:
        max_len = profile.max_position
    non_default = {
        k: getattr(ns, k)
        for k in vars(ns)
        if k not in ("subparser",) and getattr(ns, k) is not None
    }
    non_default["model"] = ns.model_tag
    return ServeConfig(
        model=ns.model_tag,
        served_name=v["served_model_name"] or ns.model_tag,
        host=v["host"] or "0.0.0.0",
        port=v["port"],
        max_model_len=max_len,
        gpu_memory_utilization=v["gpu_memory_utilization"],
        max_num_seqs=v["max_num_seqs"],
        block_size=v["block_size"],
        tensor_parallel_size=v["tensor_parallel_size"],
        enforce_eager=bool(v["enforce_eager"]),
        devices=devices[: v["tensor_parallel_size"]],
        expandable_segments=expandable,
        non_default=non_default,
        executor=v["distributed_executor_backend"]
        or ("mp" if v["tensor_parallel_size"] > 1 else "uni"),
        log_requests=bool(v["enable_log_requests"]),
        log_stats=not v["disable_log_stats"],
    )
