"""Plays a scenario's stimulus against a running fake server: the clients and the hardware.

The demo and the integration tests run it next to the doctor. It waits for the
server to be healthy for the first time, then sends the scenario's requests
and/or injects its fault, exactly once, and returns.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable

import httpx

from ascend_doctor.sim.host import SimHost
from ascend_doctor.sim.scenarios import Scenario

POLL_S = 0.1


async def wait_healthy(client: httpx.AsyncClient, base_url: str, deadline: float) -> None:
    """Poll ``/health`` until it answers 200; TimeoutError once ``deadline`` (monotonic) passes."""
    while True:
        try:
            resp = await client.get(f"{base_url}/health", timeout=1.0)
            if resp.status_code == 200:
                return
        except httpx.HTTPError:
            # Not listening yet, still loading, or restarting: keep polling.
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{base_url}/health did not answer 200 before the deadline")
        await asyncio.sleep(POLL_S)


async def _request(client: httpx.AsyncClient, base_url: str, scenario: Scenario) -> None:
    stim = scenario.stimulus
    body = {
        "model": scenario.model,
        "prompt": " ".join(["hello"] * stim.prompt_tokens),
        "max_tokens": stim.max_tokens,
    }
    try:
        await client.post(f"{base_url}/v1/completions", json=body, timeout=30.0)
    except httpx.HTTPError:
        # A dying server is the point of most scenarios; its answer does not matter.
        pass


async def drive(
    scenario: Scenario, host: SimHost, base_url: str, *, deadline_s: float = 60.0
) -> None:
    """Wait for the first healthy server, then play the stimulus once.

    Raises TimeoutError if the server is not healthy within ``deadline_s``.
    ``base_url`` must point at 127.0.0.1 (the fake server's address).
    """
    deadline = time.monotonic() + deadline_s
    stim = scenario.stimulus
    # trust_env=False: a proxy from the environment must never see sim traffic.
    async with httpx.AsyncClient(trust_env=False) as client:
        await wait_healthy(client, base_url.rstrip("/"), deadline)
        await asyncio.sleep(stim.after_seconds)
        jobs = [_request(client, base_url.rstrip("/"), scenario) for _ in range(stim.requests)]
        if stim.inject_device is not None and stim.inject_fault is not None:
            jobs.append(asyncio.to_thread(host.inject, stim.inject_device, stim.inject_fault))
        if stim.garble is not None:
            jobs.append(asyncio.to_thread(host.set_quirk, "garbled", stim.garble))
        if stim.traffic_seconds > 0:
            jobs.append(_traffic(client, base_url.rstrip("/"), scenario, host))
        await asyncio.gather(*jobs)


async def _traffic(
    client: httpx.AsyncClient, base_url: str, scenario: Scenario, host: SimHost
) -> None:
    """Requests back to back for ``traffic_seconds``; the slow part comes in on the way."""
    stim = scenario.stimulus
    start = time.monotonic()
    slowed = stim.slow is None
    while (elapsed := time.monotonic() - start) < stim.traffic_seconds:
        if not slowed and elapsed >= stim.slow_after_seconds and stim.slow is not None:
            await asyncio.to_thread(host.set_slow, dict(stim.slow))
            slowed = True
        await _request(client, base_url, scenario)
        await asyncio.sleep(0.02)  # a steady client, not a flood


def prepare(scenario: Scenario, host: SimHost) -> Callable[[], None]:
    """Set the host up as the scenario says (quirks, foreign processes holding devices)
    before the server starts; returns the cleanup that undoes it."""
    for name, value in scenario.host.quirks.items():
        host.set_quirk(name, value)
    before = {key: host.setting(key) for key in scenario.host.settings}
    for key, seconds in scenario.host.settings.items():
        host.set_setting(key, seconds)
    holders: list[subprocess.Popen[bytes]] = []
    for h in scenario.host.holders:
        # a real process, so that its PID is alive for as long as it holds the device
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(3600)"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        holders.append(proc)
        host.add_process(h.device, proc.pid, h.name, h.memory_mb)

    def cleanup() -> None:
        for name in scenario.host.quirks:
            host.set_quirk(name, None)
        for key, old in before.items():
            host.set_setting(key, old)
        if scenario.stimulus.inject_device is not None:
            # a card the doctor was right not to reset is replaced before the next deployment
            host.repair(scenario.stimulus.inject_device)
        if scenario.stimulus.slow is not None:
            host.set_slow(None)
        if scenario.stimulus.garble is not None:
            host.set_quirk("garbled", None)
        for proc in holders:
            proc.kill()
            proc.wait()

    return cleanup
