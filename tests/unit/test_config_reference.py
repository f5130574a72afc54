"""docs/configuration.md is generated from the config model and must not drift from it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ascend_doctor.cli import config_reference as ref
from ascend_doctor.core.config import Config

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"


def _all_dotted(cls: type, prefix: str = "") -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        value = getattr(cls(), f.name)
        if dataclasses.is_dataclass(value):
            out.extend(_all_dotted(type(value), f"{prefix}{f.name}."))
        else:
            out.append(f"{prefix}{f.name}")
    return out


def test_committed_reference_matches_the_generator() -> None:
    expected = ref.render()
    actual = DOC.read_text(encoding="utf-8")
    assert actual == expected, (
        "docs/configuration.md is out of date with core/config.py: run scripts/gen_config_reference"
    )


def test_every_key_is_documented_with_its_default() -> None:
    text = ref.render()
    assert ref.UNDOCUMENTED not in text, "a config field has no docstring"
    by_header = {t.header: {k.name: k for k in t.keys} for t in ref.tables()}
    for dotted in _all_dotted(Config):
        *tables, key = dotted.split(".")
        header = f"[{'.'.join(tables)}]"
        array_of_tables = f"[[{dotted}]]" in by_header  # e.g. [[alerts.sinks]]
        assert array_of_tables or key in by_header[header], f"{dotted} missing from the reference"
    rem = by_header["[remediation]"]
    assert rem["mode"].default == '"auto"'
    assert "One of: `auto`, `suggest`, `off`." in rem["mode"].meaning
    assert rem["allow_device_reset"].default == "false"
    assert by_header["[logs]"]["paths"].default == "[]"
    assert by_header["[collectors.npu_smi]"]["interval"].meaning.endswith("Must be greater than 0.")


@dataclass(frozen=True)
class _Sink:
    """A sink, as another section might declare one."""

    url: str = ""
    """Where it posts."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra headers."""


@dataclass(frozen=True)
class _Alerts:
    """Alerts."""

    sinks: tuple[_Sink, ...] = ()
    """The sinks."""
    routes: dict[str, _Sink] = field(default_factory=dict)
    """Named routes."""
    throttle: float | None = None
    """Seconds between alerts."""
    level: Literal["page", "notify"] = "notify"
    """How loud."""
    undocumented: int = 1


@dataclass(frozen=True)
class _Root:
    """Root."""

    alerts: _Alerts = field(default_factory=_Alerts)
    """``[alerts]``."""


def test_generator_handles_sections_it_has_never_seen() -> None:
    # other features add sections to Config in parallel: nothing in the generator names one
    by_header = {t.header: t for t in ref.tables(_Root)}
    assert list(by_header) == ["[alerts]", "[[alerts.sinks]]", "[alerts.routes.<name>]"]
    alerts = {k.name: k for k in by_header["[alerts]"].keys}
    assert alerts["throttle"].type == "number or nothing"
    assert alerts["throttle"].default == "(unset)"
    assert alerts["level"].type == 'one of "page", "notify"'
    assert alerts["undocumented"].meaning == ref.UNDOCUMENTED
    sink = {k.name: k for k in by_header["[[alerts.sinks]]"].keys}
    assert sink["headers"].type == "table of strings"
    assert sink["url"].meaning == "Where it posts."


def test_script_writes_the_same_text(tmp_path: Path) -> None:
    out = tmp_path / "configuration.md"
    subprocess.run(
        [sys.executable, "-m", "ascend_doctor.cli.config_reference", str(out)], check=True
    )
    assert out.read_text(encoding="utf-8") == ref.render()
