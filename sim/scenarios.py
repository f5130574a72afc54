"""Failure scenarios of the simulated host, one YAML file each in ``sim/scenarios/``.

A scenario says how the fake server is started (model, flags, env), what the
driver does to it once it is first healthy (requests and/or an injected fault),
and what the doctor is expected to conclude (category and remedial action).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from ascend_doctor.sim.faults import FAULTS
from ascend_doctor.sim.state import QUIRKS

SETTINGS = ("driver_hang_seconds", "profile_parse_seconds", "hbm_growth_mb_per_s")
"""Host settings a scenario may change (numbers of seconds)."""

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
_KEYS = {"name", "description", "model", "flags", "env", "host", "stimulus", "expect"}
_EXPECT_STATES = ("resolved", "escalated")
_STIMULUS_KEYS = {
    "requests",
    "prompt_tokens",
    "max_tokens",
    "inject",
    "after_seconds",
    "traffic_seconds",
    "slow",
    "garble",
}
_SLOW_KEYS = {"after_seconds", "rank", "part", "factor", "operator"}


@dataclass(frozen=True)
class Stimulus:
    """What the driver does once the server is first healthy."""

    requests: int = 0
    prompt_tokens: int = 0
    max_tokens: int = 16
    inject_device: int | None = None
    inject_fault: str | None = None
    after_seconds: float = 0.0
    traffic_seconds: float = 0.0
    """Send requests back to back for this long (after ``requests``), so metrics flow."""
    slow: Mapping[str, Any] | None = None
    """A slow part to inject (``profile_slow`` in the host state: rank, part, factor,
    operator) once ``slow_after_seconds`` of traffic have passed."""
    slow_after_seconds: float = 0.0
    garble: str | None = None
    """Turn the server's output to garbage (the ``garbled`` quirk: ``exclamation`` or
    ``empty``) ``after_seconds`` after it is first healthy."""


@dataclass(frozen=True)
class Holder:
    """A foreign process that holds a device for the whole scenario."""

    device: int
    name: str
    memory_mb: int


@dataclass(frozen=True)
class HostSetup:
    """How the host is prepared before the server starts."""

    quirks: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Host behaviours switched on (``sim.state.QUIRKS``)."""
    holders: tuple[Holder, ...] = ()
    """Foreign processes holding cards."""
    settings: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    """Host settings changed for the scenario (``driver_hang_seconds``, ...)."""


@dataclass(frozen=True)
class Scenario:
    """One scenario file, validated."""

    name: str
    description: str
    model: str
    flags: tuple[str, ...]
    env: Mapping[str, str]
    stimulus: Stimulus
    expect: Mapping[str, str]
    """``{"category": ..., "action": ..., "state": ...}``: what the doctor should find and
    do, and how the incident ends (``resolved`` unless said otherwise)."""
    path: Path
    host: HostSetup = field(default_factory=HostSetup)

    @property
    def expected_state(self) -> str:
        """How the scenario's incident should end."""
        return self.expect.get("state", "resolved")


def list_scenarios() -> list[str]:
    """Names of the scenarios shipped with the sim, sorted."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def load_scenario(name: str) -> Scenario:
    """Load scenario ``name``; KeyError names the known ones, ValueError a bad field."""
    path = SCENARIO_DIR / f"{name}.yaml"
    if not path.is_file():
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(list_scenarios())}")
    return parse_scenario(path)


def _fail(path: Path, key: str, why: str) -> ValueError:
    return ValueError(f"{path}: key {key!r}: {why}")


def _str(path: Path, data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, key, f"expected a non-empty string, got {value!r}")
    return value


def _number(path: Path, data: Mapping[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise _fail(path, key, f"expected a number >= 0, got {value!r}")
    return float(value)


def _stimulus(path: Path, raw: object) -> Stimulus:
    if raw is None:
        return Stimulus()
    if not isinstance(raw, dict):
        raise _fail(path, "stimulus", f"expected a mapping, got {raw!r}")
    extra = set(raw) - _STIMULUS_KEYS
    if extra:
        raise _fail(path, "stimulus", f"unknown keys {sorted(extra)}")
    device: int | None = None
    fault: str | None = None
    inject = raw.get("inject")
    if inject is not None:
        if not isinstance(inject, dict) or set(inject) != {"device", "fault"}:
            raise _fail(path, "stimulus.inject", "expected {device: N, fault: NAME}")
        device, fault = inject["device"], inject["fault"]
        if not isinstance(device, int) or isinstance(device, bool) or device < 0:
            raise _fail(path, "stimulus.inject.device", f"expected a device id, got {device!r}")
        if fault not in FAULTS:
            raise _fail(path, "stimulus.inject.fault", f"unknown fault {fault!r}")
    slow: dict[str, Any] | None = None
    slow_after = 0.0
    if raw.get("slow") is not None:
        slow = raw["slow"]
        if not isinstance(slow, dict) or set(slow) - _SLOW_KEYS or "factor" not in slow:
            raise _fail(
                path, "stimulus.slow", f"expected {{factor, rank, part, ...}} of {_SLOW_KEYS}"
            )
        if slow.get("part", "operator") not in ("operator", "collective"):
            raise _fail(path, "stimulus.slow.part", "expected operator or collective")
        slow = dict(slow)
        slow_after = _number(path, slow, "after_seconds", 0.0)
        slow.pop("after_seconds", None)
        _number(path, slow, "factor", 1.0)
    garble = raw.get("garble")
    if garble is not None and garble not in QUIRKS["garbled"]:
        raise _fail(path, "stimulus.garble", f"expected one of {QUIRKS['garbled']}")
    return Stimulus(
        garble=garble,
        traffic_seconds=_number(path, raw, "traffic_seconds", 0.0),
        slow=MappingProxyType(slow) if slow is not None else None,
        slow_after_seconds=slow_after,
        requests=int(_number(path, raw, "requests", 0)),
        prompt_tokens=int(_number(path, raw, "prompt_tokens", 0)),
        max_tokens=int(_number(path, raw, "max_tokens", 16)),
        inject_device=device,
        inject_fault=fault,
        after_seconds=_number(path, raw, "after_seconds", 0.0),
    )


def _host(path: Path, raw: object) -> HostSetup:
    if raw is None:
        return HostSetup()
    if not isinstance(raw, dict) or set(raw) - {"quirks", "holders", "settings"}:
        raise _fail(path, "host", "expected a mapping with quirks, holders and/or settings")
    quirks = _str_map(path, raw.get("quirks"), "host.quirks", ())
    for name, value in quirks.items():
        if value not in QUIRKS.get(name, ()):
            raise _fail(path, f"host.quirks.{name}", f"unknown quirk value {value!r}")
    holders = []
    for n, h in enumerate(raw.get("holders") or []):
        key = f"host.holders[{n}]"
        if not isinstance(h, dict) or set(h) != {"device", "name", "memory_mb"}:
            raise _fail(path, key, "expected {device: N, name: TEXT, memory_mb: N}")
        if not all(
            isinstance(h[k], int) and not isinstance(h[k], bool) for k in ("device", "memory_mb")
        ):
            raise _fail(path, key, "device and memory_mb must be integers")
        holders.append(Holder(h["device"], str(h["name"]), h["memory_mb"]))
    settings = raw.get("settings") or {}
    if not isinstance(settings, dict) or set(settings) - set(SETTINGS):
        raise _fail(path, "host.settings", f"expected some of {', '.join(SETTINGS)}")
    for key, value in settings.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise _fail(path, f"host.settings.{key}", f"expected a number >= 0, got {value!r}")
    return HostSetup(quirks, tuple(holders), MappingProxyType(dict(settings)))


def _str_map(path: Path, raw: object, key: str, required: tuple[str, ...]) -> Mapping[str, str]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise _fail(path, key, f"expected a mapping of strings to strings, got {raw!r}")
    missing = [k for k in required if k not in raw]
    if missing:
        raise _fail(path, key, f"missing {missing}")
    return MappingProxyType(dict(raw))


def parse_scenario(path: Path) -> Scenario:
    """Parse and validate one scenario file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    extra = set(data) - _KEYS
    if extra:
        raise _fail(path, sorted(extra)[0], "unknown key")
    flags = data.get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise _fail(path, "flags", f"expected a list of strings, got {flags!r}")
    name = _str(path, data, "name")
    expect = _str_map(path, data.get("expect"), "expect", ("category", "action"))
    if expect.get("state", "resolved") not in _EXPECT_STATES:
        raise _fail(path, "expect.state", f"expected one of {_EXPECT_STATES}")
    if name != path.stem:
        raise _fail(path, "name", f"{name!r} does not match the file name {path.stem!r}")
    return Scenario(
        name=name,
        description=_str(path, data, "description"),
        model=_str(path, data, "model"),
        flags=tuple(flags),
        env=_str_map(path, data.get("env"), "env", ()),
        stimulus=_stimulus(path, data.get("stimulus")),
        expect=expect,
        path=path,
        host=_host(path, data.get("host")),
    )
