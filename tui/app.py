"""The Textual application: screens, key bindings, the command palette, and the three
requests (acknowledge, profile, next step) it adds to the store for the daemon."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from ascend_doctor.core.procs import pid_alive
from ascend_doctor.tui.data import NoDoctor, Source
from ascend_doctor.tui.screens import (
    ConfirmScreen,
    HelpScreen,
    IncidentScreen,
    LogsScreen,
    OverviewScreen,
    ProfilesScreen,
    TracesScreen,
)

REFRESH_INTERVAL = 1.0


class DoctorApp(App[None]):
    """``ascend-doctor tui``."""

    CSS_PATH = "app.tcss"
    TITLE = "ascend-doctor"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        Binding("a", "acknowledge", "ack"),
        Binding("p", "profile", "profile"),
        Binding("r", "next_step", "next step"),
        Binding("o", "overview", "overview", show=False),
        Binding("s", "next_server", "next server", show=False),
    ]

    def __init__(
        self,
        source: Source,
        *,
        clock: Callable[[], float] = time.time,
        alive: Callable[[int], bool] = pid_alive,
        interval: float = REFRESH_INTERVAL,
    ) -> None:
        super().__init__()
        self.source = source
        self.clock = clock
        """Wall clock for ages and uptimes (injected in tests)."""
        self.alive = alive
        """Whether a pid is alive (the doctor's, from the store)."""
        self.interval = interval
        """Seconds between the end of one refresh and the start of the next."""

    def on_mount(self) -> None:
        """Start on the overview."""
        if self.source.server:
            self.sub_title = f"server {self.source.server} (s: next server)"
        self.push_screen(OverviewScreen())

    def action_next_server(self) -> None:
        """``s``: with several [[servers]], show the next one (from its overview)."""
        name = self.source.next_server()
        if not name:
            self.notify("this doctor runs one server", severity="warning")
            return
        self.sub_title = f"server {name} (s: next server)"
        self.action_overview()
        self.notify(f"showing server {name}")

    # -- navigation ------------------------------------------------------------------------------

    def open_incident(self, incident_id: int) -> None:
        """Push the incident screen."""
        self.push_screen(IncidentScreen(incident_id))

    def action_go_back(self) -> None:
        """``esc``: back to the previous screen (never past the overview)."""
        if len(self.screen_stack) > 2:
            self.pop_screen()

    def action_overview(self) -> None:
        """Back to the overview."""
        while len(self.screen_stack) > 2:
            self.pop_screen()

    def action_traces(self) -> None:
        """The traces screen."""
        self.push_screen(TracesScreen())

    def action_logs(self) -> None:
        """The logs screen."""
        self.push_screen(LogsScreen())

    def action_profiles(self) -> None:
        """The captured profiles with their analysis."""
        self.push_screen(ProfilesScreen())

    def action_help(self) -> None:
        """The help screen."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    # -- requests to the daemon ------------------------------------------------------------------

    def _incident(self) -> int | None:
        get = getattr(self.screen, "current_incident", None)
        incident = get() if callable(get) else None
        return incident if isinstance(incident, int) else None

    def action_acknowledge(self) -> None:
        """``a``: ask the doctor to acknowledge the incident."""
        incident = self._incident()
        if incident is None:
            self.notify("no incident chosen", severity="warning")
            return
        self._request("ack", incident)

    def action_profile(self) -> None:
        """``p``: ask the doctor to capture a profile of the server."""
        self._request("profile", self._incident())

    def action_next_step(self) -> None:
        """``r``: after a confirmation, ask the doctor for the incident's next step."""
        incident = self._incident()
        if incident is None:
            self.notify("no incident chosen", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._request("next_step", incident)

        self.push_screen(
            ConfirmScreen(
                f"Run the next remediation step of incident #{incident}?\n"
                "The doctor's policy still decides (mode, attempts, budget, breaker)."
            ),
            answered,
        )

    def _request(self, kind: str, incident: int | None) -> None:
        def work() -> None:
            try:
                rid, fresh = self.source.add_request(kind, incident, self.alive)
            except NoDoctor as exc:
                self.call_from_thread(self.notify, str(exc), severity="warning")
                return
            except Exception as exc:  # a read-only copy, a full disk: say so
                self.call_from_thread(
                    self.notify, f"could not ask the doctor: {exc}", severity="error"
                )
                return
            about = f" for incident #{incident}" if incident is not None else ""
            said = "queued for the doctor" if fresh else "already waiting for the doctor"
            self.call_from_thread(self.notify, f"request #{rid}: {kind}{about} {said}")

        self.run_worker(work, thread=True, group="requests")

    # -- the command palette ---------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The same actions as the keys."""
        yield from super().get_system_commands(screen)
        for title, help_text, action in (
            ("Acknowledge incident", "a: the doctor marks it seen", self.action_acknowledge),
            ("Capture profile", "p: the doctor profiles the server", self.action_profile),
            ("Run next remediation step", "r: asks first", self.action_next_step),
            ("Traces", "t: recent traces", self.action_traces),
            ("Logs", "l: every log source", self.action_logs),
            ("Profiles", "f: captured profiles and their analysis", self.action_profiles),
            ("Overview", "o: back to the overview", self.action_overview),
            ("Help", "?: key bindings", self.action_help),
        ):
            yield SystemCommand(title, help_text, partial(action))


def run(source: Source) -> None:
    """Run the TUI in this terminal until ``q``."""
    DoctorApp(source).run()


__all__ = ["DoctorApp", "run"]
