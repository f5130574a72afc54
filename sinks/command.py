"""Command sink: runs an argv (never a shell) with the alert document as JSON on stdin.

Exit status 0 is a delivery; anything else, or running past ``timeout``, is a failed delivery
that is retried with backoff. The alert's text reaches the command only on stdin, never on its
command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from typing import ClassVar

import httpx

from ascend_doctor.core.errors import ConfigError

from .base import RESPONSE_KEPT, Sink, register
from .model import Alert, Delivery


@register
class CommandSink(Sink):
    """``type = "command"``: ``argv``, ``timeout``."""

    type: ClassVar[str] = "command"

    def check(self) -> None:
        """The program exists."""
        if not self.cfg.argv:
            raise ConfigError(f"config '{self.prefix}argv' is empty: expected a command line")
        program = self.cfg.argv[0]
        found = shutil.which(program, path=self.environ.get("PATH", os.defpath))
        if found is None and not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise ConfigError(
                f"config '{self.prefix}argv' is {list(self.cfg.argv)!r}:"
                f" expected an executable program ({program} not found)"
            )

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> Delivery:
        """Run the command once."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.cfg.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env=dict(self.environ),
            )
        except OSError as exc:
            return Delivery(False, retry=True, error=f"cannot run {self.cfg.argv[0]}: {exc}")
        try:
            async with asyncio.timeout(self.timeout):
                _, err = await proc.communicate(alert.body() + b"\n")
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return Delivery(False, retry=True, error=f"timed out after {self.timeout:g}s")
        tail = err.decode(errors="replace").strip()[-RESPONSE_KEPT:]
        if proc.returncode == 0:
            return Delivery(True, response=f"exit 0 {tail}".strip())
        return Delivery(
            False,
            retry=True,
            error=f"exit status {proc.returncode}",
            response=f"exit {proc.returncode} {tail}".strip(),
        )


__all__ = ["CommandSink"]
