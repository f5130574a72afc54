"""Release behaviour of the simulated software stack, one profile per vLLM / vLLM-Ascend line.

A real Atlas host runs one release of vLLM with the matching vLLM-Ascend, torch_npu and CANN
(vllm-ascend ``docs/source/community/versioning_policy.md``, release compatibility matrix).
What the doctor reads and passes differs between releases: the start-up banner, the
"Starting ... server" line, the flags ``vllm serve`` accepts (``--profiler-config`` from 0.13,
``--swap-space`` gone in 0.18), the profiler switch (``VLLM_TORCH_PROFILER_DIR`` up to 0.13),
the engine core's process name, the KV-cache error wording and the request log line. Every field
below cites the file it was read from in ``sim/SOURCES.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

VERSION_ENV = "ASCEND_SIM_VLLM_VERSION"
"""Environment override of the host's installed release (the host state is the default)."""


@dataclass(frozen=True)
class VersionProfile:
    """One release line of the serving stack as the simulator plays it."""

    line: str
    """The release line, ``"0.11"``: what ``--sim-version`` takes."""
    vllm: str
    """``vllm.__version__`` (what ``/version`` and the start-up banner print)."""
    vllm_ascend: str
    torch: str
    torch_npu: str
    cann: str
    profiler: str
    """``env`` (VLLM_TORCH_PROFILER_DIR only), ``both`` (flag, env deprecated) or ``flag``."""
    logo_banner: bool
    """0.18+: the ASCII logo with ``version X`` instead of ``vLLM API server version X``."""
    start_line: str
    """The line printed once the HTTP server is about to serve (``{url}`` is filled in)."""
    engine_name: str
    """The engine core's multiprocessing name without data parallelism (its log prefix)."""
    prefix_always_colored: bool
    """0.11 colours the ``(Proc pid=N)`` prefix even when stdout is not a terminal."""
    kv_form: str
    """Wording of the KV-cache-too-small error: ``v11``, ``v13``, ``v18`` or ``v23``."""
    kv_memory_line: str
    """``bytes`` (``Available memory: N, total memory: M``) or ``gib`` (``Available KV cache
    memory: X GiB``), printed by vLLM-Ascend's worker."""
    gpu_util_default: float
    """``--gpu-memory-utilization``'s default (0.92 from 0.23)."""
    request_log: str
    """``prompt`` (0.11 logs the quoted prompt at INFO) or ``params`` (0.13+: params only)."""
    subcommands: tuple[str, ...]
    """``vllm`` subcommands, as argparse lists them in its usage line."""
    flags_removed: frozenset[str]
    """Flags of the common table that this release no longer has."""
    flags_added: frozenset[str]
    """Flags of the common table that this release is the first (of these) to have."""

    def has_flag(self, flag: str) -> bool:
        """Whether ``vllm serve`` of this release knows ``flag`` (of the simulated table)."""
        if flag in self.flags_removed:
            return False
        return not any(flag in p.flags_added for p in PROFILES.values() if p.newer_than(self))

    def newer_than(self, other: VersionProfile) -> bool:
        """True when this release line comes after ``other``'s."""
        return _key(self.line) > _key(other.line)

    @property
    def profiler_flag(self) -> bool:
        """``--profiler-config`` exists."""
        return self.profiler in ("both", "flag")

    @property
    def profiler_env(self) -> bool:
        """``VLLM_TORCH_PROFILER_DIR`` still switches the profiler on."""
        return self.profiler in ("env", "both")


def _key(line: str) -> tuple[int, ...]:
    return tuple(int(p) for p in line.split("."))


_OLD_SUBCOMMANDS = ("chat", "complete", "serve", "bench", "collect-env", "run-batch")
_NEW_SUBCOMMANDS = ("chat", "complete", "serve", "launch", "bench", "collect-env", "run-batch")

PROFILES: dict[str, VersionProfile] = {
    p.line: p
    for p in (
        VersionProfile(
            line="0.11",
            gpu_util_default=0.9,
            vllm="0.11.0",
            vllm_ascend="0.11.0",
            torch="2.7.1",
            torch_npu="2.7.1.post1",
            cann="8.3.RC2",
            profiler="env",
            logo_banner=False,
            start_line="Starting vLLM API server 0 on {url}",
            engine_name="EngineCore_DP0",
            prefix_always_colored=True,
            kv_form="v11",
            kv_memory_line="bytes",
            request_log="prompt",
            subcommands=_OLD_SUBCOMMANDS,
            flags_removed=frozenset(),
            flags_added=frozenset(),
        ),
        VersionProfile(
            line="0.13",
            gpu_util_default=0.9,
            vllm="0.13.0",
            vllm_ascend="0.13.0",
            torch="2.8.0",
            torch_npu="2.8.0.post2",
            cann="8.5.0",
            profiler="both",
            logo_banner=False,
            start_line="Starting vLLM API server 0 on {url}",
            engine_name="EngineCore_DP0",
            prefix_always_colored=False,
            kv_form="v13",
            kv_memory_line="bytes",
            request_log="params",
            subcommands=_OLD_SUBCOMMANDS,
            flags_removed=frozenset(),
            flags_added=frozenset({"--profiler-config"}),
        ),
        VersionProfile(
            line="0.18",
            gpu_util_default=0.9,
            vllm="0.18.0",
            vllm_ascend="0.18.0",
            torch="2.9.0",
            torch_npu="2.9.0.post1+git4c901a4",
            cann="8.5.1",
            profiler="flag",
            logo_banner=True,
            start_line="Starting vLLM server on {url}",
            engine_name="EngineCore",
            prefix_always_colored=False,
            kv_form="v18",
            kv_memory_line="gib",
            request_log="params",
            subcommands=_NEW_SUBCOMMANDS,
            flags_removed=frozenset({"--swap-space", "--disable-log-requests"}),
            flags_added=frozenset(),
        ),
        VersionProfile(
            line="0.23",
            gpu_util_default=0.92,
            vllm="0.23.0",
            vllm_ascend="0.23.0",
            torch="2.10.0",
            torch_npu="2.10.0.post2",
            cann="9.0.1",
            profiler="flag",
            logo_banner=True,
            start_line="Starting vLLM server on {url}",
            engine_name="EngineCore",
            prefix_always_colored=False,
            kv_form="v23",
            kv_memory_line="gib",
            request_log="params",
            subcommands=_NEW_SUBCOMMANDS,
            flags_removed=frozenset({"--swap-space", "--disable-log-requests"}),
            flags_added=frozenset(),
        ),
    )
}

OLDEST = "0.11"
NEWEST = "0.23"
DEFAULT = OLDEST


def get_profile(name: str | None) -> VersionProfile:
    """The profile of ``name`` (``0.11``, ``0.11.0``, ``v0.11.0``); ``None`` is the default.

    ValueError names the known lines."""
    if name is None or not name.strip():
        return PROFILES[DEFAULT]
    key = name.strip().lstrip("v")
    parts = key.split(".")
    line = ".".join(parts[:2])
    if line in PROFILES and (len(parts) == 2 or PROFILES[line].vllm == key):
        return PROFILES[line]
    known = ", ".join(sorted(PROFILES, key=_key))
    raise ValueError(f"unknown simulated vLLM version {name!r} (known lines: {known})")


def known_lines() -> list[str]:
    """Every release line, oldest first."""
    return sorted(PROFILES, key=_key)


__all__ = [
    "DEFAULT",
    "NEWEST",
    "OLDEST",
    "PROFILES",
    "VERSION_ENV",
    "VersionProfile",
    "get_profile",
    "known_lines",
]
