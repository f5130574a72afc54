"""The server's output on its way to ``server.log``: whole lines, secrets out, never blocking.

Every line the server prints is teed to its log file (which the tailer reads for the rules,
and diagnostics, evidence and bundles copy) with the values of secret-named arguments
redacted (:func:`redact_server_text`: vLLM prints its non-default args, ``api_key`` among
them); token counts and budgets stay, the rules read them. A log file that cannot be opened
or written (a read-only state dir, a full disk) loses the copy, never the server: the pipe is
always drained, or a server that prints would block on it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import BinaryIO

from ascend_doctor.collectors.vllm_access import without_probe_access
from ascend_doctor.core.redact_server import redact_server_text
from ascend_doctor.core.safeio import open_private_append

log = logging.getLogger("ascend_doctor.agent.supervisor")

HELD_BYTES = 65536
"""A line longer than this (a progress bar without a newline) is written in pieces."""


class OutputTee:
    """Where one run of the server's output goes: its log file and (``echo``) the terminal."""

    def __init__(self, path: Path, *, echo: bool) -> None:
        self._partial = b""
        self._echo: BinaryIO | None = sys.stdout.buffer if echo else None
        self._out: BinaryIO | None = None
        try:
            self._out = open_private_append(path)  # prompts are in it: 0600
        except OSError as exc:
            log.error(
                "the server's output cannot be kept in %s (%s): its crash lines are still"
                " watched, the rules do not see the rest",
                path,
                exc,
            )

    def feed(self, data: bytes) -> bytes:
        """Write the whole lines ``data`` completes (redacted); returns them, unredacted, for
        the crash markers (never kept)."""
        lines, nl, partial = (self._partial + data).rpartition(b"\n")
        whole = lines + nl
        if len(partial) > HELD_BYTES:  # no newline for a long time: write what is held
            whole, partial = whole + partial, b""
        self._partial = partial
        if whole:
            self._write(redact_server_text(whole))
        return whole

    def close(self) -> None:
        """Write what is left of the last line, and close the file."""
        if self._partial:
            self._write(redact_server_text(self._partial))
            self._partial = b""
        if self._out is not None:
            with contextlib.suppress(OSError):
                self._out.close()

    def _write(self, data: bytes) -> None:
        if self._out is not None:
            with contextlib.suppress(OSError):  # a full disk loses the copy, not the server
                self._out.write(data)
                self._out.flush()
        if self._echo is not None:
            with contextlib.suppress(OSError, ValueError):
                self._echo.write(without_probe_access(data))  # not our own probes
                self._echo.flush()


__all__ = ["HELD_BYTES", "OutputTee"]
