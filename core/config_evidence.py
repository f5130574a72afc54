"""``[evidence]``: what is kept of a live server before it is restarted or reset (its own
module to keep ``config.py`` under the house's 500 lines; ``config.py`` re-exports it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvidenceConfig:
    """What is kept of a live server before it is restarted or reset."""

    keep: int = 50
    """Snapshots kept under ``<state dir>/diagnostics`` (the oldest go first)."""
    max_mb: float = 512.0
    """Megabytes all snapshots may take together."""
    stacks: bool = True
    """Dump the Python stacks of every server process (``py-spy dump`` when installed,
    the ``stacks`` extra; else the threads' kernel side from /proc)."""
    py_spy: str = "py-spy"
    """The py-spy binary."""
    on_supervisor_restart: bool = True
    """Also before the supervisor restarts a server that failed its health probes or
    crashed, not only before remediation steps."""


__all__ = ["EvidenceConfig"]
