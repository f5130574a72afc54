"""The help screen and the confirmation dialog."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

HELP = """\
ascend-doctor tui: the doctor's store, live

  ?      this help                 q      quit
  /      filter (log, traces) / search (logs)
  enter  open the incident or trace under the cursor
  esc    back (or clear the filter)
  a      acknowledge the incident (re-arms its circuit breaker)
  p      capture a profile of the server
  r      run the incident's next remediation step (asks first;
         the policy still decides)
  t      traces        l  logs         o  overview
  f      profiles: each capture's analysis (step split, slow rank)
  ctrl+p command palette (the same actions)

A * after an incident's state: an operator acknowledged it.
Actions are requests in the store: the doctor carries them out
and records the result (see the incident's requests tab).
Times are UTC."""


class HelpScreen(ModalScreen[None]):
    """Key bindings and what the actions do."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "close"),
        Binding("question_mark", "dismiss", "close"),
        Binding("q", "dismiss", "close"),
    ]

    def compose(self) -> ComposeResult:
        """The text."""
        with Vertical(id="help-box"):
            yield Static(HELP, id="help-text")

    def action_dismiss(self) -> None:  # type: ignore[override]
        """Close."""
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """Yes or no."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "answer(False)", "no"),
        Binding("n", "answer(False)", "no"),
        Binding("y", "answer(True)", "yes"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        """Question and two buttons."""
        with Grid(id="confirm-box"):
            yield Static(self.question, id="confirm-question")
            yield Button("Yes (y)", variant="warning", id="yes")
            yield Button("No (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        """No is the default."""
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """A button answers."""
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        """A key answers."""
        self.dismiss(yes)


__all__ = ["ConfirmScreen", "HelpScreen"]
