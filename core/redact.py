"""Secrets never leave the doctor: values whose names say they are secret are replaced
before anything is printed, stored, exported or bundled."""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from ascend_doctor.core import regex

T = TypeVar("T", str, bytes)

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
    if isinstance(value, str):
        return redact_text(value)
    return value


_WORD = r"(?:key|token|secret|passw(?:or)?d|credential)"
_QUOTED = r"\1\2<redacted>\2"
_TEXT = [
    # --api-key X, --hf-token=X (argv echoed, ps output, a command line in a log)
    (rf"(?i)(--[\w-]*{_WORD}[\w-]*(?:=|\s+))(?!<redacted>)[^\s'\",]+", r"\1<redacted>"),
    # ["--api-key", "X"] (an argv as JSON or a Python list)
    (
        rf"(?i)(['\"]--[\w-]*{_WORD}[\w-]*['\"],\s*)(['\"])(?!<redacted>)[^'\"]*\2",
        r"\1\2<redacted>\2",
    ),
    # 'api_key': ['X'] (vLLM takes several keys: a list)
    (rf"(?i)(['\"]?\w*{_WORD}\w*['\"]?\s*[:=]\s*\[)(?!'<redacted>')[^\]]*\]", r"\1'<redacted>']"),
    # 'api_key': 'X', "hf_token": "X", api_key='X' (vLLM's non-default args, a Namespace repr)
    (
        rf"(?i)(['\"]?\w*{_WORD}\w*['\"]?\s*[:=]\s*)(['\"])(?!<redacted>)[^'\"]*\2",
        r"\1\2<redacted>\2",
    ),
    # HF_TOKEN=X, VLLM_API_KEY=X (an environment)
    (rf"(?i)\b([A-Z0-9_]*{_WORD}[A-Z0-9_]*=)(?!<redacted>)[^\s'\",]+", r"\1<redacted>"),
    # scheme://user:password@host
    (r"(\b[a-zA-Z][\w+.-]*://[^\s/:@]+:)[^\s/@]+(@)", r"\1<redacted>\2"),
    # Authorization: Bearer X
    (r"(?i)(\bbearer\s+)[\w.~+/=-]+", r"\1<redacted>"),
]
_TEXT_STR = [(regex.compile(p), r) for p, r in _TEXT]
_TEXT_BYTES = [(regex.compile(p.encode()), r.encode()) for p, r in _TEXT]


def redact_text(text: T) -> T:
    """``text`` (a log tail, a command line, a message) with secret values replaced: secret
    ``--flags``, secret-named keys and env vars, passwords in URLs, bearer tokens."""
    if isinstance(text, bytes):
        out_b = text
        for pb, rb in _TEXT_BYTES:
            out_b = pb.sub(rb, out_b)
        return out_b
    out = text
    for ps, rs in _TEXT_STR:
        out = ps.sub(rs, out)
    return out


def redact_params(value: Any) -> Any:
    """A decision's params with secrets inside their values redacted (argv lists by their
    secret ``--flags``, strings by :func:`redact_text`); keys are kept, so that a param named
    ``key`` (an override's variable name) is not mistaken for a secret."""
    if isinstance(value, dict):
        return {k: redact_params(v) for k, v in value.items()}
    if isinstance(value, list):
        return redact(value)
    if isinstance(value, str):
        return redact_text(value)
    return value


class RedactingFilter(logging.Filter):
    """Redacts every log record's message and its traceback (a reason quoting ``--api-key``,
    an exception that prints a command line, a source line in a traceback) before a handler
    writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Always keeps the record, with its message, traceback and stack redacted."""
        message = record.getMessage()
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, ()
        # the handler's formatter uses exc_text when it is set: formatted here, redacted
        if record.exc_info and not record.exc_text:
            record.exc_text = _TRACEBACKS.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


_TRACEBACKS = logging.Formatter()


__all__ = [
    "REDACTED",
    "SECRET_WORDS",
    "RedactingFilter",
    "is_secret",
    "redact",
    "redact_params",
    "redact_text",
]
