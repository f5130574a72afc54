"""Small text renderers the widgets share: sparklines, bars, durations, times, colours that
follow the theme (pure; Rich only)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text

if TYPE_CHECKING:
    from textual.app import App

SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int, top: float | None = None) -> str:
    """The last ``width`` values as block characters (scaled to ``top`` or their maximum)."""
    vals = list(values)[-width:]
    if not vals:
        return ""
    peak = top if top is not None else max(vals)
    if peak <= 0:
        return SPARKS[0] * len(vals)
    n = len(SPARKS) - 1
    return "".join(SPARKS[max(0, min(n, round(v / peak * n)))] for v in vals)


def bar(fraction: float, width: int) -> str:
    """A horizontal bar ``█████░░░`` of ``width`` cells."""
    fraction = max(0.0, min(1.0, fraction))
    full = round(fraction * width)
    return "█" * full + "░" * (width - full)


def ago(seconds: float) -> str:
    """``42s``, ``5m``, ``3h``, ``2d``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def uptime(seconds: float) -> str:
    """``1h02m``, ``5m12s``."""
    s = max(0, int(seconds))
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def clock_time(at: float) -> str:
    """A wall time as ``HH:MM:SS`` UTC (the same on every terminal, and in snapshots)."""
    return time.strftime("%H:%M:%S", time.gmtime(at))


def date_time(at: float) -> str:
    """A wall time as ``YYYY-MM-DD HH:MM:SSZ``."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(at))


class Palette:
    """Colours taken from the current theme (so light and dark themes both read well)."""

    def __init__(self, variables: Mapping[str, str]) -> None:
        def pick(*names: str) -> str:
            for name in names:
                value = variables.get(name)
                if value and value.startswith("#"):
                    return value[:7]
            return "default"

        self.error = pick("error")
        self.warning = pick("warning")
        self.success = pick("success")
        self.accent = pick("accent", "primary")
        self.primary = pick("primary")

    @classmethod
    def of(cls, app: App[object]) -> Palette:
        """The palette of the app's current theme (built once per theme)."""
        key = app.theme
        cached = _PALETTES.get((id(app), key))
        if cached is None:
            cached = cls(app.get_css_variables())
            _PALETTES[(id(app), key)] = cached
        return cached

    def severity(self, sev: int | None) -> Style:
        """The style of a line or incident of this severity (40 critical .. 10 info)."""
        if sev is None:
            return Style()
        if sev >= 40:
            return Style(color=self.error, bold=True)
        if sev >= 30:
            return Style(color=self.error)
        if sev >= 20:
            return Style(color=self.warning)
        return Style(color=self.primary)

    def state(self, state: str) -> Style:
        """The style of an incident or server state."""
        good = ("resolved", "RUNNING", "OK", "done")
        bad = ("escalated", "open", "FATAL", "EXITED", "BACKOFF", "failed")
        if state in good:
            return Style(color=self.success)
        if state in bad:
            return Style(color=self.error, bold=True)
        if state in ("mitigating", "STARTING", "STOPPING", "pending", "Warning"):
            return Style(color=self.warning)
        return Style()

    def text(self, value: str, style: Style) -> Text:
        """``value`` in ``style``."""
        return Text(value, style=style)


_PALETTES: dict[tuple[int, str], Palette] = {}

__all__ = ["Palette", "ago", "bar", "clock_time", "date_time", "sparkline", "uptime"]
