"""Verification: is the server healed? An incident stays ``mitigating`` until the server ran
healthy for the settle window after the step and answers a 1-token completion (``/health``
only says the API server is up); then it is ``resolved``. A failed check means the step did
not help, and the next one is due. Every verdict is recorded as a ``verify`` decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import httpx

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.events import ACTIVE_STATES, Incident, IncidentState, Outcome

log = logging.getLogger(__name__)

AFTER_START = frozenset({"undrain"})
"""Decisions recorded on an incident after its server started again (several servers: it is
put back in the balancer): not a step, so the run after them is still the one to judge."""

Probe = Callable[[str, float], Awaitable[tuple[bool, str]]]
Record = Callable[[int, str, Outcome, str], None]


async def completion_probe(base_url: str, timeout: float) -> tuple[bool, str]:
    """Ask the server for one token: /health says the API is up, this says the engine works."""
    t0 = time.monotonic()
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            models = (await client.get(f"{base_url}/v1/models")).json()
            model = models["data"][0]["id"]
            resp = await client.post(
                f"{base_url}/v1/completions",
                json={"model": model, "prompt": "ping", "max_tokens": 1},
            )
            if resp.status_code != 200:
                return False, f"1-token completion answered {resp.status_code}"
            if not resp.json().get("choices"):
                return False, "1-token completion answered without choices"
    except (httpx.HTTPError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        return False, f"1-token completion failed: {type(exc).__name__}: {exc}"
    return True, f"1-token completion in {time.monotonic() - t0:.2f}s"


class Verifier:
    """Judges the server's current run for the incidents a step is mitigating."""

    def __init__(
        self,
        incidents: IncidentManager,
        config: RemediationConfig,
        record: Record,
        url: Callable[[], str],
        *,
        probe: Probe = completion_probe,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.incidents = incidents
        self.store = incidents.store
        self.config = config
        self._record = record
        self._url = url
        self._probe = probe
        self._clock = clock
        self._probed_run = 0.0  # the run whose completion probe passed

    def waiting(self, run_start: float) -> list[Incident]:
        """Mitigating incidents whose last step came before this run of the server."""
        return [
            inc
            for inc in self.store.incidents(states=ACTIVE_STATES)
            if inc.state == IncidentState.MITIGATING
            and (acts := [a for a in self.store.actions(inc.id) if a.name not in AFTER_START])
            and acts[-1].at <= run_start
        ]

    async def check(self, run_start: float, current_run: Callable[[], float]) -> list[int]:
        """One pass over a run healthy since ``run_start`` (the caller waited the settle
        window); returns the incidents whose step did not help (their next step is due)."""
        waiting = self.waiting(run_start)
        if not waiting:
            return []
        ok, why = True, f"/health 200 for {self._clock() - run_start:.0f}s"
        if self.config.completion_probe and self._probed_run != run_start:
            ok, detail = await self._probe(self._url(), self.config.probe_timeout)
            why = f"{why}; {detail}"
            if current_run() != run_start:
                return []  # the server restarted meanwhile: judge the new run
        again = []
        for inc in waiting:
            self._record(inc.id, "verify", Outcome.OK if ok else Outcome.FAILED, why)
            if ok:
                self.incidents.resolve(inc.id, why)
            else:
                # healthy but not serving: the step did not help, the next one runs
                log.error("incident %d not resolved: %s", inc.id, why)
                again.append(inc.id)
        if ok:
            self._probed_run = run_start
        return again

    async def watch(
        self,
        running: Callable[[], bool],
        run_start: Callable[[], float],
        new_run: asyncio.Event,
        again: Callable[[int], None],
    ) -> None:
        """Until cancelled: once the server has been healthy for the settle window after it
        became RUNNING (``new_run`` is set then), judge what the last step was mitigating;
        the incidents whose step did not help go to ``again``."""
        settle = self.config.settle_seconds
        while True:
            await new_run.wait()
            new_run.clear()
            while running():
                left = run_start() + settle - self._clock()
                if left <= 0:
                    run = run_start()
                    try:
                        for incident_id in await self.check(run, run_start):
                            again(incident_id)
                    except Exception:  # a failing part is logged and isolated
                        log.exception("verification failed")
                    if run == run_start():
                        break
                    continue  # a new run began meanwhile: judge that one
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await new_run.wait()  # a new run restarts the wait
                new_run.clear()


__all__ = ["Verifier", "completion_probe"]
