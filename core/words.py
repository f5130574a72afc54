"""Words for humans that every floor prints: one place for the plural of a count."""

from __future__ import annotations

__all__ = ["plural"]


def plural(n: float, word: str, words: str | None = None) -> str:
    """``1 attempt``, ``2 attempts``, ``0.5 requests`` (only exactly one is singular)."""
    shown = f"{n:g}" if isinstance(n, float) else str(n)
    return f"{shown} {word if n == 1 else (words or word + 's')}"
