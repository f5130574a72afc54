"""Reading the config file: TOML in, a validated :class:`Config` out. An error names the
file, the line when it can be found, the key, the value and what was expected; it stops
start-up. The model itself (every key and its default) is ``config.py``."""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from ascend_doctor.core import regex
from ascend_doctor.core.config import CHOICES, POSITIVE, Config
from ascend_doctor.core.errors import ConfigError
from ascend_doctor.core.ha import check_servers


def load_config(path: Path | None) -> Config:
    """Read and validate a config file; ``None`` gives the defaults."""
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    config: Config = _build(Config, raw, "", _Source(path, text))
    check_servers(config.servers, config.ha)
    return config


@dataclass(frozen=True)
class _Source:
    path: Path
    text: str

    def where(self, dotted: str) -> str:
        """``file:line`` of a key when it can be found, else ``file``."""
        *tables, key = dotted.split(".")
        lines = self.text.splitlines()
        start = 0
        index = re.fullmatch(r"(.*)\[(\d+)\]", tables[-1]) if tables else None
        if index:  # a table of an array of tables: the n-th [[a.b]] header
            names = [*tables[:-1], index.group(1)]
            header = regex.compile(r"^\s*\[\[\s*" + r"\s*\.\s*".join(map(re.escape, names)))
            starts = [i for i, ln in enumerate(lines) if header.match(ln)]
            n = int(index.group(2))
            start = starts[n] if n < len(starts) else 0
        elif tables:
            header = regex.compile(
                r"^\s*\[\s*" + r"\s*\.\s*".join(map(re.escape, tables)) + r"\s*\]"
            )
            start = next((i for i, ln in enumerate(lines) if header.match(ln)), 0)
        pat = regex.compile(r"^\s*" + re.escape(key) + r"\s*=")
        for i in range(start, len(lines)):
            if pat.match(lines[i]):
                return f"{self.path}:{i + 1}"
        return str(self.path)


def _build(cls: type[Any], raw: Any, prefix: str, src: _Source) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{src.where(prefix)}: config '{prefix}' must be a table")
    hints = get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in known:
            dotted = f"{prefix}{key}"
            raise ConfigError(
                f"{src.where(dotted)}: unknown config key '{dotted}'; "
                f"known keys here: {', '.join(sorted(known))}"
            )
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        dotted = f"{prefix}{f.name}"
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            values[f.name] = _build(hint, raw[f.name], dotted + ".", src)  # type: ignore[arg-type]
        elif get_origin(hint) is tuple and dataclasses.is_dataclass(get_args(hint)[0]):
            # an array of tables ([[alerts.sinks]]): each built like a table, keys as a.b[i].c
            if not isinstance(raw[f.name], list):
                raise ConfigError(
                    f"{src.where(dotted)}: config '{dotted}' must be an array of tables"
                    f" ([[{dotted}]])"
                )
            item = get_args(hint)[0]
            values[f.name] = tuple(
                _build(item, r, f"{dotted}[{i}].", src) for i, r in enumerate(raw[f.name])
            )
        else:
            values[f.name] = _coerce(hint, raw[f.name], dotted, src)
    return cls(**values)


def _coerce(hint: Any, value: Any, dotted: str, src: _Source) -> Any:
    def bad(expected: str) -> ConfigError:
        return ConfigError(
            f"{src.where(dotted)}: config '{dotted}' is {value!r}: expected {expected}"
        )

    plain = re.sub(r"\[\d+\]", "", dotted)  # alerts.sinks[1].type checks as alerts.sinks.type

    if hint is bool:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        if value < 0 or (plain in POSITIVE and value == 0):
            raise bad("a positive integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number")
        if value < 0 or (plain in POSITIVE and value == 0):
            raise bad("a positive number")
        if dotted.endswith("gpu_memory_utilization") and not 0 < value <= 1:
            raise bad("a number in (0, 1]")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise bad("a string")
        choices = CHOICES.get(plain)
        if choices and value not in choices:
            raise bad("one of " + ", ".join(choices))
        return value
    if get_origin(hint) is tuple and get_args(hint)[0] is str:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of strings")
        return tuple(value)
    if get_origin(hint) is dict:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise bad("a table of strings")
        return dict(value)
    raise bad(f"a value of type {hint}")  # pragma: no cover - every field type is handled above


def default_state_dir() -> Path:
    """``/var/lib/ascend-doctor`` as root, else ``$XDG_STATE_HOME/ascend-doctor``."""
    if os.geteuid() == 0:
        return Path("/var/lib/ascend-doctor")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ascend-doctor"


__all__ = ["default_state_dir", "load_config"]
