"""The captured profiles, newest first, each with the analysis stored with it: the same
report with bars as ``ascend-doctor profile analyze`` prints."""

from __future__ import annotations

import time
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from ascend_doctor.core.records import Artifact
from ascend_doctor.tui.screens.base import RefreshingScreen

SHOWN = 5
"""Captures shown; older ones are in ``ascend-doctor bundle`` and the state dir."""


def profile_text(artifacts: list[Artifact]) -> str:
    """The newest captures, each with its path, span and stored report (pure)."""
    if not artifacts:
        return "no profile captured yet (p asks the doctor for one)"
    blocks = []
    for art in reversed(artifacts[-SHOWN:]):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(art.started_at))
        head = f"{art.kind} at {when}, {art.ended_at - art.started_at:.1f} s: {art.path}"
        if art.analysis is None:
            body = "  not analysed (captured before the doctor analysed captures)"
        else:
            body = art.analysis.report or f"  {art.analysis.headline}"
        blocks.append(f"{head}\n{body}")
    return "\n\n".join(blocks)


class ProfilesScreen(RefreshingScreen[list[Artifact]]):
    """Every captured profile's analysis, newest first."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.go_back", "back")]

    def compose(self) -> ComposeResult:
        """Title and the reports."""
        yield Static("profiles (newest first, with their analysis)", classes="title")
        with VerticalScroll():
            yield Static("loading...", id="profiles-report", markup=False)
        yield Footer()

    def load(self) -> list[Artifact]:
        """The stored artifacts (worker thread)."""
        with self.doctor.source.reader() as store:
            return store.artifacts()

    def show(self, data: list[Artifact]) -> None:
        """Replace the text (markup off: the report is plain text with bars)."""
        self.query_one("#profiles-report", Static).update(profile_text(data))
