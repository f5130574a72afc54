"""Which vLLM release the server runs: the profiler is switched on the way that release takes
it (``--profiler-config`` from 0.13, ``VLLM_TORCH_PROFILER_DIR`` before). Learned with
``vllm --version`` before the first start (bounded) and from ``GET /version`` once it runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Mapping

import httpx

from ascend_doctor.core.launch import LaunchSpec, version_probe
from ascend_doctor.core.records import ServerVersion
from ascend_doctor.core.store import Store

log = logging.getLogger(__name__)

VERSION_PROBE_TIMEOUT = 15.0
"""Seconds ``vllm --version`` may take (it imports vLLM) before the doctor goes on without it."""


async def probe_version(store: Store, spec: LaunchSpec, env: Mapping[str, str]) -> None:
    """``vllm --version`` of the server's command, recorded (a failure leaves it unknown)."""
    argv = version_probe(spec.argv)
    if argv is None or store.server_version() is not None:
        return
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        log.warning("vllm --version could not run: %s", exc)
        return
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), VERSION_PROBE_TIMEOUT)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        log.warning("vllm --version did not answer in %ss", VERSION_PROBE_TIMEOUT)
        return
    found = re.search(rb"^v?(\d+\.\d+\.\d+\S*)\s*$", out[-4096:], re.M)
    if proc.returncode == 0 and found is not None:
        version = found.group(1).decode()
        store.set_server_version(ServerVersion(version, "vllm --version", time.time()))


async def learn_version(store: Store, url: str) -> None:
    """``GET /version`` of the running server: the release it really runs."""
    if not url:
        return
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=2.0) as client:
            version = str((await client.get(url + "/version")).json()["version"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return
    known = store.server_version()
    if known is None or known.vllm != version:
        store.set_server_version(ServerVersion(version, "/version", time.time()))
        log.info("the server runs vLLM %s; the profiler follows from its next start", version)


class VersionWatch:
    """Learns the server's release: before its first start and each time it comes up."""

    def __init__(self, store: Store, url: Callable[[], str], enabled: bool) -> None:
        self.store = store
        self._url = url
        self.enabled = enabled
        """Only profiling needs the release (today): off, nothing runs."""
        self._task: asyncio.Future[None] | None = None  # kept so it is not collected mid-read

    async def before_start(self, spec: LaunchSpec | None, env: Mapping[str, str]) -> None:
        """``vllm --version`` of the command about to be started."""
        if self.enabled and spec is not None:
            await probe_version(self.store, spec, env)

    def running(self) -> None:
        """The server answers: read its ``/version`` in the background."""
        if self.enabled:
            self._task = asyncio.ensure_future(learn_version(self.store, self._url()))


__all__ = ["VERSION_PROBE_TIMEOUT", "VersionWatch", "learn_version", "probe_version"]
