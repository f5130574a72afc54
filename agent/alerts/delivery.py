"""The delivery loop: drains the outbox to the sinks, in the daemon's asyncio loop.

Per sink and per dedup key, rows go in id order: a resolve never overtakes its trigger. A
network error, a timeout, 429 or 5xx keeps the row and pauses the sink (exponential backoff
with jitter, at least Retry-After); any other 4xx fails the row for good, recorded with the
response. Each sink has a token bucket and its own task per pass: one slow or failing sink
never holds up another. The loop also notices acknowledgements written by other processes,
repeats unacknowledged firing alerts, re-sends firing alerts to Alertmanager, and keeps each
sink's status in the store's meta (``alerts.sinks``) for ``status`` and the TUI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import httpx

from ascend_doctor.core.events import Incident, IncidentState
from ascend_doctor.core.records import SinkStatus
from ascend_doctor.core.store import AlertRow
from ascend_doctor.sinks.base import Sink
from ascend_doctor.sinks.model import Alert, Delivery, Kind

from .listener import LIVE, AlertListener
from .routing import silenced_by

log = logging.getLogger(__name__)

FINAL_FLUSH = 5.0  # seconds a stopping daemon gives the outbox to go out
REPEAT_CHECK = 30.0  # seconds between scans for alerts due a repeat
KEEP_DAYS = 7.0  # finished outbox rows are kept this long (the newest per key for ever)
PRUNE_EVERY = 3600.0


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.last = now

    def take(self, now: float) -> bool:
        """Spend a token if there is one."""
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Deliverer:
    """Drains the outbox of an :class:`AlertListener`."""

    def __init__(
        self,
        listener: AlertListener,
        *,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self.listener = listener
        self.store = listener.store
        self.config = listener.config
        self.clock = clock
        self.rng = rng or random.Random()
        now = clock()
        self.buckets = {s.name: TokenBucket(s.rate, s.burst, now) for s in listener.sinks}
        self.paused_until = {s.name: 0.0 for s in listener.sinks}
        self.next_resend = {s.name: now + s.resend_interval for s in listener.sinks}
        self.stats: dict[str, dict[str, Any]] = {
            s.name: {"type": s.type, "role": s.role, "failures": 0, "last_error": ""}
            for s in listener.sinks
        }
        self._acked: set[int] = set()
        self._next_repeat = 0.0
        self._next_prune = 0.0
        self._last_status: Any = None
        self.client: httpx.AsyncClient | None = None

    async def run(self) -> None:
        """Deliver until cancelled; then one bounded last pass."""
        if not self.listener.sinks:
            return
        async with httpx.AsyncClient() as client:
            self.client = client
            try:
                while True:
                    await self._guarded_pass()
                    await asyncio.sleep(self.config.poll_interval)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()  # finish what is due, within a bound, then stop
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._guarded_pass(), FINAL_FLUSH)
                raise

    async def _guarded_pass(self) -> None:
        try:
            await self.pass_once()
        except Exception:  # a failing part is logged and isolated; delivery goes on
            log.exception("alert delivery pass failed")

    async def pass_once(self) -> None:
        """One pass: acknowledgements, repeats, deliveries, re-sends, status."""
        now = self.clock()
        self._poll_acknowledged()
        if self.config.repeat_interval and now >= self._next_repeat:
            self._next_repeat = now + min(REPEAT_CHECK, self.config.repeat_interval)
            self._repeat(now)
        client = self.client or httpx.AsyncClient()
        try:
            await asyncio.gather(*(self._drain(s, client, now) for s in self.listener.sinks))
            await asyncio.gather(*(self._resend(s, client, now) for s in self.listener.sinks))
        finally:
            if client is not self.client:
                await client.aclose()
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY
            self.store.prune_alerts(now - KEEP_DAYS * 86400)
        self._write_status()

    # -- acknowledgements and repeats ----------------------------------------------------------

    def _poll_acknowledged(self) -> None:
        """The CLI (or the TUI) sets the flag from another process: acknowledge it here."""
        for incident_id in self.store.acknowledged_incident_ids():
            if incident_id in self._acked:
                continue
            self._acked.add(incident_id)
            self.listener.acknowledge(self.store.incident(incident_id))

    def _repeat(self, now: float) -> None:
        for sink in self.listener.sinks:
            if sink.resend_interval:
                continue  # re-sent by _resend, Alertmanager does its own repeating
            for row in self._firing(sink):
                sent = row.sent_at or row.created_at
                if row.incident_id is None or sent + self.config.repeat_interval > now:
                    continue
                inc = self.store.incident(row.incident_id)
                if inc.acknowledged or inc.state == IncidentState.RESOLVED:
                    continue
                if self._silenced(inc, now):
                    continue
                alert = self.listener.alert(inc, row.event, Kind.TRIGGER, repeat=True)
                self.store.add_alert(
                    sink.name, row.dedup_key, inc.id, Kind.TRIGGER.value, row.event,
                    alert.to_json(), next_at=now, now=now,
                )  # fmt: skip

    def _silenced(self, inc: Incident, now: float) -> bool:
        return silenced_by(self.store.silences(active_at=now), inc) is not None

    def _firing(self, sink: Sink) -> list[AlertRow]:
        """Rows of alerts firing at a sink: the newest live row of the key is a sent trigger."""
        newest: dict[str, AlertRow] = {}
        for row in self.store.alerts(sink=sink.name, statuses=LIVE):
            newest[row.dedup_key] = row
        return [r for r in newest.values() if r.kind == Kind.TRIGGER and r.status == "sent"]

    # -- delivery --------------------------------------------------------------------------------

    async def _drain(self, sink: Sink, client: httpx.AsyncClient, now: float) -> None:
        if now < self.paused_until[sink.name]:
            return
        blocked: set[str] = set()
        for row in self.store.alerts(sink=sink.name, statuses=("pending",)):
            if row.dedup_key in blocked:
                continue
            if row.next_at > now:
                blocked.add(row.dedup_key)  # what follows it waits for it
                continue
            if not self.buckets[sink.name].take(now):
                return  # throttled: the rest waits for the next pass
            alert = self._current(row)
            result = await self._send(sink, alert, client)
            attempts = row.attempts + 1
            if result.ok:
                self.store.update_alert(
                    row.id,
                    alert=alert.to_json(),
                    status="sent",
                    attempts=attempts,
                    sent_at=now,
                    last_error="",
                    response=result.response,
                )
                self.stats[sink.name]["last_ok_at"] = now
                continue
            self._failed(sink, result, now)
            if not result.retry:
                log.warning(
                    "alert %d to sink %s rejected for good: %s", row.id, sink.name, result.error
                )
                self.store.update_alert(
                    row.id,
                    status="failed",
                    attempts=attempts,
                    last_error=result.error,
                    response=result.response,
                )
                continue
            delay = min(self.config.retry_max, self.config.retry_initial * 2 ** (attempts - 1))
            delay = max(delay * (0.5 + 0.5 * self.rng.random()), result.retry_after)
            self.store.update_alert(
                row.id,
                attempts=attempts,
                next_at=now + delay,
                last_error=result.error,
                response=result.response,
            )
            self.paused_until[sink.name] = now + delay
            log.warning(
                "alert %d to sink %s failed (%s); retry in %.1fs", row.id, sink.name,
                result.error, delay,
            )  # fmt: skip
            return

    def _current(self, row: AlertRow) -> Alert:
        """A trigger carries the incident as it is now (evidence stored after it opened, the
        actions taken while the sink was down); the queued document when it is gone."""
        queued = Alert.from_json(row.alert)
        if row.kind != Kind.TRIGGER or row.incident_id is None:
            return queued
        try:
            inc = self.store.incident(row.incident_id)
        except KeyError:
            return queued
        return self.listener.alert(inc, row.event, Kind.TRIGGER, repeat=queued.repeat)

    async def _send(self, sink: Sink, alert: Alert, client: httpx.AsyncClient) -> Delivery:
        try:
            async with asyncio.timeout(sink.timeout + 5.0):
                return await sink.send(alert, client)
        except TimeoutError:
            return Delivery(False, retry=True, error=f"timed out after {sink.timeout:g}s")
        except Exception as exc:  # a sink's bug must not stop delivery to the others
            log.exception("sink %s failed", sink.name)
            return Delivery(
                False, retry=True, error=sink.scrubber()(f"{type(exc).__name__}: {exc}")
            )

    def _failed(self, sink: Sink, result: Delivery, now: float) -> None:
        st = self.stats[sink.name]
        st["failures"] += 1
        st["last_error"] = result.error + (f" ({result.response})" if result.response else "")
        st["last_error_at"] = now

    async def _resend(self, sink: Sink, client: httpx.AsyncClient, now: float) -> None:
        """Alertmanager forgets an alert not re-sent in time: re-send what is firing."""
        if not sink.resend_interval or now < self.next_resend[sink.name]:
            return
        if now < self.paused_until[sink.name]:
            return
        self.next_resend[sink.name] = now + sink.resend_interval
        for row in self._firing(sink):
            result = await self._send(sink, Alert.from_json(row.alert), client)
            if not result.ok:
                self._failed(sink, result, now)
                return  # the next re-send tries again; the state is in the outbox

    # -- status ----------------------------------------------------------------------------------

    def status(self) -> dict[str, SinkStatus]:
        """Each sink's delivery state: counts by outbox status, failures, last error."""
        counts = self.store.alert_counts()
        out = {}
        for sink in self.listener.sinks:
            c = counts.get(sink.name, {})
            st = self.stats[sink.name]
            out[sink.name] = SinkStatus(
                type=sink.type,
                role=sink.role,
                queued=c.get("pending", 0),
                sent=c.get("sent", 0),
                failed=c.get("failed", 0),
                silenced=c.get("silenced", 0),
                failures=int(st["failures"]),
                last_error=str(st["last_error"]),
                last_error_at=st.get("last_error_at"),
                last_ok_at=st.get("last_ok_at"),
                paused_until=self.paused_until[sink.name] or None,
            )
        return out

    def _write_status(self) -> None:
        status = self.status()
        if status != self._last_status:
            self.store.set_sinks(status)
            self._last_status = status


__all__ = ["Deliverer", "TokenBucket"]
