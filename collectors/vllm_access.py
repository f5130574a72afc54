"""The access lines the doctor's own probes cause in vLLM's output.

vLLM's API server (uvicorn) prints one access line per request, e.g.
``(APIServer pid=7) INFO:     127.0.0.1:37314 - "GET /health HTTP/1.1" 200 OK``. The doctor
asks /health, /metrics and /v1/models every few seconds from loopback, so on the operator's
terminal these lines would bury everything the server says. They are kept in the server log
(the evidence is whole) and left out only of what is echoed to the terminal.
"""

from __future__ import annotations

import re

from ascend_doctor.core import regex

PROBE_ACCESS = regex.compile(
    rb'^[^\n]*\b(?:127\.0\.0\.1|\[?::1\]?):\d+ - "GET /(?:health|metrics|v1/models|version)'
    rb' HTTP/[\d.]+" 200\b[^\n]*(?:\n|$)',
    re.M,
)
"""A successful loopback GET of a path the doctor probes: the doctor's own request."""


def without_probe_access(data: bytes) -> bytes:
    """``data`` without the access lines of successful probes (any other line is kept, a
    failed probe's too: that one tells the operator something)."""
    return PROBE_ACCESS.sub(b"", data) if b'"GET /' in data else data


__all__ = ["PROBE_ACCESS", "without_probe_access"]
