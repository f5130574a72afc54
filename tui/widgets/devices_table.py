"""One row per NPU: health, HBM used/total with a bar, AI Core %, temperature, power, and
sparklines of the recent samples. Row keys are the device subjects, so rows stay put."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from ascend_doctor.tui.data import DeviceView
from ascend_doctor.tui.render import Palette, bar, sparkline

COLUMNS = ("npu", "health", "HBM", "AI%", "°C", "W", "HBM trend", "AI trend")
COMPACT = COLUMNS[:6]  # an 80-column terminal: the essentials, no trends


class DevicesTable(DataTable[Any]):
    """The devices table."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self.spark_width = 10
        self.bar_width = 6
        self.compact = False
        self._devices: tuple[DeviceView, ...] = ()

    def on_mount(self) -> None:
        """Columns with stable keys."""
        self._columns()

    def _columns(self) -> None:
        for name in COMPACT if self.compact else COLUMNS:
            self.add_column(name, key=name)

    def set_compact(self, compact: bool) -> None:
        """Drop (or bring back) the trend columns."""
        if compact == self.compact:
            return
        self.compact = compact
        self.clear(columns=True)
        self._columns()
        self.show(self._devices)

    def show(self, devices: tuple[DeviceView, ...]) -> None:
        """Update rows in place; add new devices, drop vanished ones."""
        self._devices = devices
        pal = Palette.of(self.app)
        names = COMPACT if self.compact else COLUMNS
        seen = set()
        for dev in devices:
            seen.add(dev.subject)
            cells = self._cells(dev, pal)[: len(names)]
            if dev.subject in self.rows:
                for name, value in zip(names, cells, strict=True):
                    self.update_cell(dev.subject, name, value, update_width=True)
            else:
                self.add_row(*cells, key=dev.subject)
        for key in [k for k in self.rows if k.value not in seen]:
            self.remove_row(key)

    def _cells(self, dev: DeviceView, pal: Palette) -> list[Any]:
        health_style = pal.state("OK" if dev.health == "OK" else "failed")
        if dev.hbm_used_mb is not None and dev.hbm_total_mb:
            frac = dev.hbm_used_mb / dev.hbm_total_mb
            hbm = Text(bar(frac, self.bar_width), style=_load_style(pal, frac))
            hbm.append(f" {dev.hbm_used_mb / 1024:4.1f}/{dev.hbm_total_mb / 1024:.0f}G")
        else:
            hbm = Text("-")
        return [
            dev.subject,
            Text(dev.health, style=health_style),
            hbm,
            _n(dev.aicore_pct, "{:.0f}"),
            _n(dev.temp_c, "{:.0f}"),
            _n(dev.power_w, "{:.0f}"),
            Text(sparkline(dev.hbm_history, self.spark_width, 100.0), style=pal.accent),
            Text(sparkline(dev.aicore_history, self.spark_width, 100.0), style=pal.primary),
        ]


def _n(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _load_style(pal: Palette, frac: float) -> str:
    if frac >= 0.95:
        return pal.error
    if frac >= 0.85:
        return pal.warning
    return pal.success


__all__ = ["DevicesTable"]
