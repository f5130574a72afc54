"""The server panel: running and waiting requests, KV cache usage, tokens/s, TTFT p99."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ascend_doctor.tui.data import ServerView
from ascend_doctor.tui.render import Palette, ago, bar, sparkline

STALE = 60.0  # seconds after which the newest sample no longer says how the server is


class ServerPanel(Static):
    """A few lines from the newest vLLM sample."""

    def show(self, view: ServerView, now: float, state: str = "RUNNING") -> None:
        """Render ``view`` as of ``now``; ``state`` is the supervisor's (a stopped server is
        said to be stopped, not to fail its health check)."""
        pal = Palette.of(self.app)
        out = Text()
        if view.at is None:
            out.append("no server samples", style="dim")
            self.update(out)
            return
        health = view.health_status
        if state in ("RUNNING", "not supervised"):
            out.append("health ")
            out.append(
                "200 OK" if health == 200 else f"down ({health or 'no answer'})",
                style=pal.state("OK" if health == 200 else "failed"),
            )
        else:
            out.append(f"server {state}", style=pal.state(state))
            out.append(" (last sample)", style="dim")
        age = now - view.at
        out.append(f"  {ago(age)} ago" + (" (stale)" if age > STALE else "") + "\n", style="dim")
        out.append(f"running {_n(view.running, '{:.0f}')}  waiting {_n(view.waiting, '{:.0f}')}\n")
        out.append("KV cache ")
        if view.kv_cache_usage is not None:
            out.append(bar(view.kv_cache_usage, 8), style=pal.accent)
            out.append(f" {view.kv_cache_usage * 100:.0f}%\n")
        else:
            out.append("-\n")
        out.append(f"tokens/s {_n(view.tokens_per_s, '{:.0f}')} ")
        out.append(sparkline(view.tokens_history, 8) + "\n", style=pal.primary)
        ttft = view.ttft_p99
        out.append(f"TTFT p99 {'-' if ttft is None else f'{ttft * 1000:.0f} ms'}")
        self.update(out)


def _n(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


__all__ = ["ServerPanel"]
