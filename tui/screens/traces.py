"""Recent traces (incidents and the server's requests), filterable, and one trace's waterfall."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer, Input, Static

from ascend_doctor.core.store import SpanRecord
from ascend_doctor.tui.detail import TraceRow, load_trace, load_traces
from ascend_doctor.tui.messages import OpenTrace, SpanChosen
from ascend_doctor.tui.screens.base import RefreshingScreen, search_key, slash_typed
from ascend_doctor.tui.widgets import SpanDetail, TracesTable, Waterfall


class TracesScreen(RefreshingScreen[tuple[TraceRow, ...]]):
    """The newest traces; ``/`` filters, ``enter`` opens the waterfall."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back_or_clear", "back"),
        search_key("filter", "filter"),
    ]

    def compose(self) -> ComposeResult:
        """Title, filter, table."""
        yield Static("traces (newest first; enter opens)", classes="title")
        yield Input(
            placeholder="filter traces by name, source, status, #incident", id="traces-filter"
        )
        yield TracesTable(id="traces")
        yield Footer()

    def on_mount(self) -> None:
        """The table has the focus."""
        self.query_one(TracesTable).focus()
        super().on_mount()

    def load(self) -> tuple[TraceRow, ...]:
        """Root spans (worker thread)."""
        return load_traces(self.doctor.source)

    def show(self, data: tuple[TraceRow, ...]) -> None:
        """Update the table."""
        self.query_one(TracesTable).show(data)

    def action_filter(self) -> None:
        """``/``: show and focus the filter."""
        if slash_typed(self):
            return
        box = self.query_one(Input)
        box.add_class("open")
        # now, not at the next idle as focus() would: keys typed right after / go to the box
        self.set_focus(box)

    def on_input_changed(self, event: Input.Changed) -> None:
        """Filter as the operator types."""
        self.query_one(TracesTable).set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """``enter`` keeps the filter and goes back to the table."""
        event.input.remove_class("open")
        self.set_focus(self.query_one(TracesTable))

    def action_back_or_clear(self) -> None:
        """``esc``: clear the filter first, then go back."""
        box = self.query_one(Input)
        if box.value or box.has_class("open"):
            box.value = ""
            box.remove_class("open")
            self.query_one(TracesTable).set_filter("")
            self.set_focus(self.query_one(TracesTable))
        else:
            self.doctor.action_go_back()

    def on_open_trace(self, message: OpenTrace) -> None:
        """Open the waterfall."""
        self.app.push_screen(TraceScreen(message.trace_id, message.title))


class TraceScreen(RefreshingScreen[tuple[SpanRecord, ...]]):
    """One trace's waterfall with the chosen span's detail beside it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.go_back", "back")]

    def __init__(self, trace_id: str, title: str) -> None:
        super().__init__()
        self.trace_id = trace_id
        self.title_text = title

    def compose(self) -> ComposeResult:
        """Title, waterfall, detail."""
        yield Static(f"trace {self.title_text}  ({self.trace_id})", classes="title")
        with Horizontal(classes="trace-box"):
            yield Waterfall(id="waterfall")
            yield SpanDetail(id="span-detail")
        yield Footer()

    def on_mount(self) -> None:
        """The waterfall has the focus."""
        self.query_one(Waterfall).focus()
        super().on_mount()

    def load(self) -> tuple[SpanRecord, ...]:
        """The spans (worker thread)."""
        return load_trace(self.doctor.source, self.trace_id)

    def show(self, data: tuple[SpanRecord, ...]) -> None:
        """Update the waterfall."""
        self.query_one(Waterfall).show(data)

    def on_span_chosen(self, message: SpanChosen) -> None:
        """The side panel follows the cursor."""
        self.query_one(SpanDetail).show(message.span)

    def current_incident(self) -> int | None:
        """The incident of this trace, when it is one."""
        spans = self.query_one(Waterfall).spans
        return next((s.incident_id for s in spans if s.incident_id is not None), None)


__all__ = ["TraceScreen", "TracesScreen"]
