"""The launch spec of ``vllm serve``: argv and env as data.

Remediation produces a new spec; the overrides are stored so that a restarted
doctor relaunches the server with what was learned.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ascend_doctor.core.config import ProfilingConfig
from ascend_doctor.core.errors import ConfigError
from ascend_doctor.core.store import Override


@dataclass(frozen=True)
class LaunchSpec:
    """A command line and the environment additions it runs with."""

    argv: tuple[str, ...]
    """The server's argv, e.g. ``("vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", ...)``."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Variables set on top of the doctor's own environment."""

    def flag(self, name: str) -> str | None:
        """The value of ``--name V`` or ``--name=V`` (the last one wins), else None."""
        value = None
        args = self.argv
        for i, arg in enumerate(args):
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
        return value

    def has_flag(self, name: str) -> bool:
        """Whether a bare flag such as ``--enforce-eager`` is present."""
        return any(a == name or a.startswith(name + "=") for a in self.argv)

    def with_flag(self, name: str, value: str) -> LaunchSpec:
        """The spec with ``--name value`` replacing any earlier value."""
        out: list[str] = []
        skip = False
        for i, arg in enumerate(self.argv):
            if skip:
                skip = False
                continue
            if arg == name and i + 1 < len(self.argv):
                skip = True
                continue
            if arg.startswith(name + "="):
                continue
            out.append(arg)
        return LaunchSpec((*out, name, value), self.env)

    def with_bare_flag(self, name: str) -> LaunchSpec:
        """The spec with a bare flag added once."""
        if self.has_flag(name):
            return self
        return LaunchSpec((*self.argv, name), self.env)

    def with_env(self, name: str, value: str) -> LaunchSpec:
        """The spec with one environment variable set."""
        return LaunchSpec(self.argv, {**self.env, name: value})

    def getenv(self, name: str, base: Mapping[str, str]) -> str | None:
        """A variable as the server will see it (spec env over ``base``)."""
        return self.env.get(name, base.get(name))

    def apply(self, overrides: Iterable[Override]) -> LaunchSpec:
        """The spec with stored overrides applied in order."""
        spec = self
        for o in overrides:
            if o.kind == "arg":
                spec = spec.with_flag(o.key, o.value)
            elif o.kind == "flag":
                spec = spec.with_bare_flag(o.key)
            elif o.kind == "env":
                spec = spec.with_env(o.key, o.value)
        return spec

    def devices(self, base_env: Mapping[str, str]) -> list[int]:
        """NPUs the server uses: the first tensor-parallel-size of ASCEND_RT_VISIBLE_DEVICES."""
        visible = self.getenv("ASCEND_RT_VISIBLE_DEVICES", base_env)
        try:
            ids = [int(x) for x in visible.split(",") if x.strip()] if visible else []
        except ValueError:
            ids = []
        tp_text = self.flag("--tensor-parallel-size") or self.flag("-tp") or "1"
        try:
            tp = max(1, int(tp_text))
        except ValueError:
            tp = 1
        if not ids:
            ids = list(range(tp))
        return ids[:tp]

    def health_base_url(self) -> str:
        """``http://HOST:PORT`` the server listens on, from --host/--port (vLLM's defaults)."""
        host = self.flag("--host") or "127.0.0.1"
        if host in ("0.0.0.0", "", "::"):
            host = "127.0.0.1"
        port = self.flag("--port") or "8000"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{port}"


def check_url(url: str) -> str:
    """A health base URL must be http(s) on some host; returns it without a trailing slash."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"expected an http:// URL, got {url!r}")
    return url.rstrip("/")


def server_spec(
    base: LaunchSpec,
    overrides: Iterable[Override],
    profiling: ProfilingConfig,
    torch_dir: Path,
    traces_url: str | None,
    vllm_version: str | None = None,
) -> LaunchSpec:
    """The spec the doctor starts the server with: the operator's command, every learned
    override, and what the doctor's own features need (the profiler's directory, PROFILING_MODE
    for msprof, vLLM's OTLP exporter pointed at the doctor's receiver).

    The profiler is switched on the way the server's release takes it: ``--profiler-config``
    from vLLM 0.13 (0.18 drops ``VLLM_TORCH_PROFILER_DIR``), the environment variable before
    (an unknown flag makes ``vllm serve`` exit 2). While the release is unknown the variable is
    used: harmless everywhere, and the doctor learns the release from the running server."""
    spec = base.apply(overrides)
    if profiling.enabled and spec.flag("--profiler-config") is None:
        if profiling.legacy_env or not profiler_flag(vllm_version):
            spec = spec.with_env("VLLM_TORCH_PROFILER_DIR", str(torch_dir))
        else:
            cfg = {"profiler": "torch", "torch_profiler_dir": str(torch_dir)}
            spec = spec.with_flag("--profiler-config", json.dumps(cfg))
    if profiling.msprof:
        spec = spec.with_env("PROFILING_MODE", "dynamic")
    if traces_url is not None and spec.flag("--otlp-traces-endpoint") is None:
        # vLLM's exporter defaults to grpc; the receiver speaks OTLP/HTTP
        spec = spec.with_flag("--otlp-traces-endpoint", traces_url)
        spec = spec.with_env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    return spec


def profiler_flag(vllm_version: str | None) -> bool:
    """Whether vLLM ``vllm_version`` takes ``--profiler-config`` (0.13 and later)."""
    if not vllm_version:
        return False
    match = re.match(r"v?(\d+)\.(\d+)", vllm_version.strip())
    return match is not None and (int(match[1]), int(match[2])) >= (0, 13)


def version_probe(argv: tuple[str, ...]) -> list[str] | None:
    """``vllm --version`` for a ``... vllm serve ...`` command (everything before ``serve``),
    or None when the command has no ``serve``."""
    if "serve" not in argv:
        return None
    return [*argv[: argv.index("serve")], "--version"]


__all__ = ["LaunchSpec", "check_url", "profiler_flag", "server_spec", "version_probe"]
