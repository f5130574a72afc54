"""Secrets never leave the doctor: values whose names say they are secret are replaced
before anything is printed, stored, exported or bundled."""

from __future__ import annotations

from typing import Any

REDACTED = "<redacted>"
SECRET_WORDS = ("secret", "token", "key", "password", "url", "header")
"""A config key (or env var, or ``--flag``) whose name contains one of these is redacted."""


def is_secret(name: str) -> bool:
    """Whether a key, env var or flag name looks like it holds a secret."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def redact(value: Any) -> Any:
    """A copy of ``value`` with every secret-named key's value replaced; argv lists redact
    the value after (or ``=`` in) a secret-named ``--flag``."""
    if isinstance(value, dict):
        return {k: REDACTED if is_secret(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        out: list[Any] = []
        hide_next = False
        for item in value:
            if hide_next:
                out.append(REDACTED)
                hide_next = False
            elif isinstance(item, str) and item.startswith("-") and is_secret(item):
                flag, eq, _ = item.partition("=")
                out.append(f"{flag}={REDACTED}" if eq else item)
                hide_next = not eq
            else:
                out.append(redact(item))
        return out
    return value


__all__ = ["REDACTED", "SECRET_WORDS", "is_secret", "redact"]
