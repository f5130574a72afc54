"""What a canary completion's answer means: pure functions on the status and the body.

The failures operators report while ``/health`` says 200 (vllm-project/vllm#17972: nothing
running, /health 200, no answer; vllm-project/vllm-ascend#445, #562, #6980: output of nothing
but ``!!!!!!``; empty completions and U+FFFD replacement characters after an upgrade or on a
bad card) are each one verdict here, so that the unit tests can feed them real bodies and the
collector stays I/O only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

REPLACEMENT = "\ufffd"
QUOTE_CHARS = 120
"""How much of a bad answer a verdict quotes."""
MIN_REPEATS = 4
"""A token repeated this many times, and nothing else, is a stuck decoder (a few tokens of a
greedy answer to the canary's prompt never are)."""


@dataclass(frozen=True)
class Verdict:
    """One canary's outcome."""

    kind: str
    """``ok``, ``timeout``, ``unreachable``, ``http_error``, ``malformed``, ``empty``,
    ``replacement``, ``repetition`` or ``drift``."""
    detail: str
    """What was wrong, in words ('' when ok)."""
    text: str = ""
    """The completion's text as returned (quoted, cut to ``QUOTE_CHARS``)."""

    @property
    def ok(self) -> bool:
        """The server answered as it should."""
        return self.kind == "ok"

    @property
    def corrupt(self) -> bool:
        """The server answered 200 with output that is garbage (not merely slow)."""
        return self.kind in CORRUPT


CORRUPT = frozenset({"malformed", "empty", "replacement", "repetition", "drift"})
"""Verdicts of a server that answers, wrongly."""


def completion_text(body: str) -> str | None:
    """``choices[0].text`` of an OpenAI completion body (``message.content`` of a chat one);
    None when the body is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    first = choices[0]
    if isinstance(first.get("text"), str):
        return str(first["text"])
    message = first.get("message")
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        return str(message["content"])
    return None


def quote(text: str) -> str:
    """A bad answer as a summary shows it: repr-quoted (no raw control characters), cut."""
    shown = repr(text[:QUOTE_CHARS])
    return shown + ("..." if len(text) > QUOTE_CHARS else "")


def garbled(text: str) -> tuple[str, str] | None:
    """(kind, detail) when ``text`` is empty, mostly replacement characters or one token
    repeated; None when it reads like an answer."""
    stripped = "".join(text.split())
    if not stripped:
        return "empty", "the completion is empty"
    bad = stripped.count(REPLACEMENT)
    if bad * 2 >= len(stripped):
        return "replacement", f"{bad} of {len(stripped)} characters are U+FFFD"
    words = text.split()
    if len(words) >= MIN_REPEATS and len(set(words)) == 1:
        return "repetition", f"one token repeated {len(words)} times"
    if len(stripped) >= MIN_REPEATS and len(set(stripped)) == 1:
        return "repetition", f"{stripped[0]!r} repeated {len(stripped)} times"
    return None


def judge(status: int, body: str, reference: str | None) -> Verdict:
    """The verdict on an answer with HTTP ``status`` and ``body``; ``reference`` is the text
    this launch answered at its first healthy start (None: not recorded yet)."""
    if status != 200:
        return Verdict("http_error", f"HTTP {status}: {body.strip()[:200]}")
    text = completion_text(body)
    if text is None:
        return Verdict("malformed", f"not an OpenAI completion: {body.strip()[:200]!r}")
    bad = garbled(text)
    if bad is not None:
        return Verdict(bad[0], bad[1], quote(text))
    if reference is not None and text != reference:
        return Verdict(
            "drift",
            f"answer {quote(text)} differs from this launch's first {quote(reference)}",
            quote(text),
        )
    return Verdict("ok", "", quote(text))


__all__ = ["CORRUPT", "Verdict", "completion_text", "garbled", "judge", "quote"]
