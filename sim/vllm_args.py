"""Command line of the fake ``vllm serve``: flags, defaults and environment."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ascend_doctor.sim.engine_core import ServeConfig
from ascend_doctor.sim.models import get_profile

_DEFAULTS: dict[str, Any] = {
    "host": "0.0.0.0",
    "port": 8000,
    "max_model_len": None,
    "gpu_memory_utilization": 0.92,
    "max_num_seqs": 256,
    "enforce_eager": False,
    "block_size": 128,
    "tensor_parallel_size": 1,
    "served_model_name": None,
}


def _model_len(value: str) -> int:
    # vLLM accepts human forms such as "32k".
    v = value.strip().lower()
    return int(float(v[:-1]) * 1024) if v.endswith("k") else int(v)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Parse ``serve MODEL [flags]``; unknown flags are returned, not rejected."""
    p = argparse.ArgumentParser(prog="vllm", add_help=True)
    p.add_argument("command", choices=["serve"])
    p.add_argument("model_tag")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--max-model-len", type=_model_len, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--enforce-eager", action="store_true", default=None)
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--profiler-config", type=_profiler_config, default=None)
    p.add_argument("--otlp-traces-endpoint", default=None)
    return p.parse_known_args(argv)


def _profiler_config(value: str) -> dict[str, Any]:
    # vLLM validates the JSON into ProfilerConfig; argparse turns the ValueError into exit 2.
    data = json.loads(value)
    if not isinstance(data, dict):
        raise ValueError("profiler config must be a JSON object")
    return data


def profiler_dir(ns: argparse.Namespace) -> Path | None:
    """Where torch traces go: ``--profiler-config`` (new) or ``VLLM_TORCH_PROFILER_DIR`` (old).

    None means profiling is off and ``/start_profile`` does not exist, as in vLLM.
    """
    cfg: dict[str, Any] | None = ns.profiler_config
    if cfg is not None:
        if cfg.get("profiler") != "torch" or not cfg.get("torch_profiler_dir"):
            return None
        return Path(os.path.expanduser(str(cfg["torch_profiler_dir"]))).absolute()
    env = os.environ.get("VLLM_TORCH_PROFILER_DIR")
    return Path(os.path.expanduser(env)).absolute() if env else None


def dynamic_profiling() -> bool:
    """True when started with ``PROFILING_MODE=dynamic`` (msprof may attach)."""
    return os.environ.get("PROFILING_MODE", "").strip().lower() == "dynamic"


def build_config(ns: argparse.Namespace) -> ServeConfig:
    """Resolve defaults, env and the model profile into the effective config."""
    given = {k: getattr(ns, k) for k in _DEFAULTS if getattr(ns, k) is not None}
    v = {**_DEFAULTS, **given}
    profile = get_profile(ns.model_tag)
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "0")
    devices = [int(d) for d in visible.split(",") if d.strip().isdigit()]
    alloc = os.environ.get("PYTORCH_NPU_ALLOC_CONF", "")
    expandable = any(
        item.strip().lower() == "expandable_segments:true" for item in alloc.split(",")
    )
    return ServeConfig(
        model=ns.model_tag,
        served_name=v["served_model_name"] or ns.model_tag,
        host=v["host"],
        port=v["port"],
        max_model_len=v["max_model_len"] or profile.max_position,
        gpu_memory_utilization=v["gpu_memory_utilization"],
        max_num_seqs=v["max_num_seqs"],
        block_size=v["block_size"],
        tensor_parallel_size=v["tensor_parallel_size"],
        enforce_eager=bool(v["enforce_eager"]),
        devices=devices[: v["tensor_parallel_size"]],
        expandable_segments=expandable,
        non_default={"model_tag": ns.model_tag, **given, "model": ns.model_tag},
    )
