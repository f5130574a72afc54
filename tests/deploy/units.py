"""A reader of systemd unit files, enough to check the shipped units' structure."""

from __future__ import annotations

from pathlib import Path

Unit = dict[str, list[tuple[str, str]]]


def parse_unit(path: Path) -> Unit:
    """Sections -> (key, value) in order; repeated keys stay separate entries."""
    unit: Unit = {}
    section = ""
    pending = ""
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            assert section not in unit, f"{path}:{n}: section [{section}] twice"
            unit[section] = []
            continue
        assert section, f"{path}:{n}: key outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{path}:{n}: not a key=value line: {raw!r}"
        unit[section].append((key.strip(), value.strip()))
    return unit


def values(unit: Unit, section: str, key: str) -> list[str]:
    """Every value of ``key`` in ``section``."""
    return [v for k, v in unit.get(section, []) if k == key]


def value(unit: Unit, section: str, key: str) -> str | None:
    """The last value of ``key`` (systemd: the last assignment wins for single-valued keys)."""
    found = values(unit, section, key)
    return found[-1] if found else None


def environment(unit: Unit) -> dict[str, str]:
    """``Environment=`` assignments of [Service] (one NAME=VALUE per line, as shipped)."""
    env = {}
    for item in values(unit, "Service", "Environment"):
        name, _, val = item.partition("=")
        env[name] = val
    return env
