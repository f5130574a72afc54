"""The chosen span's name, timing, status, attributes and events (a fixed-width side panel)."""

from __future__ import annotations

import json

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ascend_doctor.core.store import SpanRecord
from ascend_doctor.tui.render import Palette, date_time
from ascend_doctor.tui.waterfall_model import duration_text


class SpanDetail(VerticalScroll):
    """Scrolls on its own; never resizes the waterfall."""

    def compose(self):  # type: ignore[no-untyped-def]
        """One Static holding the text."""
        yield Static("", id="span-text")

    def show(self, span: SpanRecord | None) -> None:
        """Describe ``span`` (or say there is none)."""
        out = Text()
        if span is None:
            out.append("no spans stored for this trace", style="dim")
        else:
            pal = Palette.of(self.app)
            out.append(span.name + "\n", style="bold")
            out.append(f"{span.kind}  {duration_text(span.end_ns - span.start_ns)}\n")
            out.append(f"start {date_time(span.start_ns / 1e9)}\n", style="dim")
            out.append("status ")
            out.append(
                # OpenTelemetry's "unset" is the default: the span ended without an error
                ("no error recorded" if span.status == "unset" else span.status) + "\n",
                style=pal.severity(30) if span.status.startswith("error") else "",
            )
            out.append(f"span {span.span_id}\n", style="dim")
            if span.attributes:
                out.append("\nattributes\n", style="bold")
                for k in sorted(span.attributes):
                    out.append(f" {k} = {_v(span.attributes[k])}\n")
            if span.events:
                out.append("\nevents\n", style="bold")
                base = span.start_ns
                for e in span.events:
                    at = int(e.get("time_ns", base)) - base
                    out.append(f" +{duration_text(max(0, at))} {e.get('name', '?')}\n")
                    for k, v in sorted((e.get("attributes") or {}).items()):
                        out.append(f"    {k} = {_v(v)}\n")
        self.query_one("#span-text", Static).update(out)


def _v(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


__all__ = ["SpanDetail"]
