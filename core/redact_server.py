"""Secrets in the server's own output, redacted narrowly: the rules read the same lines.

vLLM prints its non-default arguments at start-up (``non-default args: {..., 'api_key':
['sk-...']}``, ``vllm/entrypoints/utils.py`` ``log_non_default_args``) and its command line
in tracebacks; that output is teed to ``server.log`` and copied into diagnostics, evidence and
bundles. :func:`redact_text` (``core/redact.py``) is too wide for it: its ``token`` hides
``max_tokens=16`` and ``max_num_batched_tokens``, which rules and operators read. Here only a
name whose *last* part (split at ``_`` or ``-``) is ``key``,
``apikey``, ``token``, ``secret``, ``password``, ``passwd`` or ``credential(s)`` has its value
hidden: ``api_key``, ``--api-key X``, ``hf_token``, ``HF_TOKEN=``, ``access_token``; also
``Authorization: Bearer X`` and a password in a URL. ``max_tokens``, ``num_tokens``,
``token_budget`` and ``max_num_batched_tokens`` are kept.
"""

from __future__ import annotations

from typing import TypeVar

from ascend_doctor.core import regex

T = TypeVar("T", str, bytes)

_LAST = r"(?:api_?key|key|token|secret|passw(?:or)?d|credentials?)"
# a name whose last part is a secret word, not inside a longer word or name
_BARE = rf"(?:[A-Za-z0-9]+[_-])*{_LAST}(?![\w-])"
_NAME = rf"(?<![\w-]){_BARE}"
_VALUE = r"(?!<redacted>)[^\s'\",)}\]]+"
_PATTERNS = [
    # --api-key X, --hf-token=X (a command line echoed in a log or a traceback)
    (rf"(?i)((?<![\w-])--{_BARE}(?:=|\s+))(?!-){_VALUE}", r"\1<redacted>"),
    # ['--api-key', 'X'] (an argv as a Python list or JSON)
    (rf"(?i)(['\"]--{_BARE}['\"],\s*)(['\"])(?!<redacted>)[^'\"]*\2", r"\1\2<redacted>\2"),
    # 'api_key': ['X', 'Y'] (vLLM takes several API keys: a list)
    (rf"(?i)(['\"]?{_NAME}['\"]?\s*[:=]\s*\[)(?!'<redacted>')[^\]]*\]", r"\1'<redacted>']"),
    # 'api_key': 'X', "hf_token": "X", api_key='X' (non-default args, a Namespace repr)
    (rf"(?i)(['\"]?{_NAME}['\"]?\s*[:=]\s*)(['\"])(?!<redacted>)[^'\"]*\2", r"\1\2<redacted>\2"),
    # HF_TOKEN=X, api_key=X, token: X (an environment, a key=value line)
    (rf"(?i)({_NAME}(?:=|:[ \t]*))(?!None\b)(?!['\"\[]){_VALUE}", r"\1<redacted>"),
    # scheme://user:password@host
    (r"(\b[a-zA-Z][\w+.-]*://[^\s/:@]+:)[^\s/@]+(@)", r"\1<redacted>\2"),
    # Authorization: Bearer X
    (r"(?i)(\bbearer\s+)(?!<redacted>)[\w.~+/=-]+", r"\1<redacted>"),
]
_STR = [(regex.compile(p), r) for p, r in _PATTERNS]
_BYTES = [(regex.compile(p.encode()), r.encode()) for p, r in _PATTERNS]
_HINT = regex.compile(
    rb"(?i)key|token|secret|passw|credential|bearer|://"
)  # most lines name none of them: one scan instead of seven


def redact_server_text(text: T) -> T:
    """``text`` (lines of the server's output) with the values of secret-named arguments,
    keys and environment variables, bearer tokens and URL passwords replaced; token counts
    and budgets kept."""
    if isinstance(text, bytes):
        if not _HINT.search(text):
            return text
        out_b = text
        for pb, rb in _BYTES:
            out_b = pb.sub(rb, out_b)
        return out_b
    if not _HINT.search(text.encode("utf-8", "surrogateescape")):
        return text
    out = text
    for ps, rs in _STR:
        out = ps.sub(rs, out)
    return out


__all__ = ["redact_server_text"]
