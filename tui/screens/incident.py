"""One incident: summary and explanation, root cause and symptoms with their evidence lines,
every decision with its reason, and the incident's trace as a waterfall."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Static, TabbedContent, TabPane

from ascend_doctor.tui.data import severity_label
from ascend_doctor.tui.detail import FindingView, IncidentDetail, load_incident
from ascend_doctor.tui.messages import SpanChosen
from ascend_doctor.tui.render import Palette, date_time
from ascend_doctor.tui.screens.base import RefreshingScreen
from ascend_doctor.tui.widgets import DecisionsTable, SpanDetail, Waterfall


class IncidentScreen(RefreshingScreen[IncidentDetail]):
    """What went wrong, what the doctor did about it, and why."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.go_back", "back"),
        Binding("e", "tab('evidence')", "evidence"),
        Binding("w", "tab('trace')", "waterfall"),
    ]

    def __init__(self, incident_id: int) -> None:
        super().__init__()
        self.incident_id = incident_id

    def compose(self) -> ComposeResult:
        """Summary, decisions, then trace / evidence / requests tabs."""
        yield Static(f"incident #{self.incident_id}", id="inc-summary")
        yield Static("decisions", classes="title")
        yield DecisionsTable(id="decisions")
        with TabbedContent(initial="trace", id="inc-tabs"):
            with TabPane("trace", id="trace"):
                with Horizontal(classes="trace-box"):
                    yield Waterfall(id="waterfall")
                    yield SpanDetail(id="span-detail")
            with TabPane("evidence", id="evidence"):
                with VerticalScroll():
                    yield Static("", id="inc-evidence")
            with TabPane("requests", id="requests"):
                with VerticalScroll():
                    yield Static("", id="inc-requests")
        yield Footer()

    def on_mount(self) -> None:
        """The decisions have the focus."""
        self.query_one(DecisionsTable).focus()
        super().on_mount()

    def load(self) -> IncidentDetail:
        """The incident, its findings, decisions, requests and spans (worker thread)."""
        return load_incident(self.doctor.source, self.incident_id)

    def show(self, data: IncidentDetail) -> None:
        """Update every part."""
        pal = Palette.of(self.app)
        inc = data.incident
        head = Text()
        head.append(f"#{inc.id} ", style="bold")
        head.append(inc.state, style=pal.state(inc.state))
        head.append(" ")
        head.append(severity_label(inc.severity), style=pal.severity(inc.severity))
        head.append(f" {inc.category} on {inc.subject}")
        if inc.acknowledged:
            head.append("  acknowledged", style=pal.state("resolved"))
        head.append(f"\n{inc.summary}\n", style="bold")
        head.append(f"opened {date_time(inc.opened_at)}")
        if inc.resolved_at:
            head.append(f", {inc.state} {date_time(inc.resolved_at)}")
        tries = f"{inc.attempts} attempt" + ("" if inc.attempts == 1 else "s")
        head.append(f", {tries}, rule {data.rule}\n")
        head.append(data.explanation, style="italic")
        self.query_one("#inc-summary", Static).update(head)
        self.query_one(DecisionsTable).show(data.actions)
        self.query_one(Waterfall).show(data.spans)
        if not data.spans:
            self.query_one(SpanDetail).show(None)
        self.query_one("#inc-evidence", Static).update(_evidence(data, pal))
        self.query_one("#inc-requests", Static).update(_requests(data))

    def on_span_chosen(self, message: SpanChosen) -> None:
        """The side panel follows the waterfall's cursor."""
        self.query_one(SpanDetail).show(message.span)

    def action_tab(self, tab: str) -> None:
        """Switch the lower tabs."""
        self.query_one(TabbedContent).active = tab

    def current_incident(self) -> int | None:
        """This incident (for acknowledge and next step)."""
        return self.incident_id


def _evidence(data: IncidentDetail, pal: Palette) -> Text:
    out = Text()

    def section(title: str, findings: tuple[FindingView, ...]) -> None:
        if not findings:
            return
        out.append(title + "\n", style="bold")
        for f in findings:
            out.append(f" [{f.severity}] ", style=pal.severity(_sev(f.severity)))
            out.append(f"{f.summary} ({f.rule})\n")
            for e in f.evidence:
                out.append(f"   {e.where}: ", style="dim")
                out.append(e.text[:400] + "\n")

    section("root cause", data.roots)
    section("symptoms", data.symptoms)
    if not data.roots and not data.symptoms:
        out.append("no findings stored", style="dim")
    return out


def _sev(label: str) -> int:
    return {"critical": 40, "error": 30, "warning": 20}.get(label, 10)


def _requests(data: IncidentDetail) -> Text:
    out = Text()
    if not data.requests:
        out.append("no requests (a acknowledge, p profile, r next step)", style="dim")
    for r in data.requests:
        out.append(f"#{r.id} {r.kind} {r.state}: {r.result}\n")
    return out


__all__ = ["IncidentScreen"]
