"""Spans per second per client: one noisy OTLP client cannot starve the others.

A *client* is what sends: its peer address (every client of a loopback receiver is
127.0.0.1, and a peer port is only one connection, which a client changes at will) and the
resource it says it is (``service.name`` and ``service.instance.id``, which every OpenTelemetry
SDK sets). Each client has its own token bucket (``rate`` spans a second, a burst of one
second's worth); a request whose spans do not fit its client's bucket is refused whole (429),
the others' buckets untouched.

A client can claim any resource, so the table is bounded: at most ``max_clients`` buckets,
an idle one (nothing sent for ``idle`` seconds) forgotten first; a new client beyond that
shares one overflow bucket. A client that invents a new instance id for every request thus
gains at most the table's worth, and never takes a bucket from a client already in it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ascend_doctor.core.store import SpanRecord

OVERFLOW = "(other clients)"
"""The bucket shared by clients beyond the table's size."""


@dataclass
class _Bucket:
    tokens: float
    filled: float


class ClientLimits:
    """Token buckets by client; :meth:`admit` charges a request's spans to their clients."""

    def __init__(
        self,
        rate: float,
        *,
        max_clients: int = 32,
        idle: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.max_clients, self.idle, self.clock = rate, max_clients, idle, clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def admit(self, peer: str, spans: Sequence[SpanRecord]) -> str | None:
        """None when every client in the request had room (their tokens are spent), else the
        client that had none (nothing is spent)."""
        now = self.clock()
        wanted: dict[str, int] = {}
        for key in {client_of(peer, span) for span in spans}:
            wanted.setdefault(self._bucket(key, now), 0)
        for span in spans:
            wanted[self._resolve(client_of(peer, span))] += 1
        for key, n in wanted.items():
            if n > self._buckets[key].tokens:
                return key
        for key, n in wanted.items():
            self._buckets[key].tokens -= n
        return None

    @property
    def clients(self) -> list[str]:
        """The clients with a bucket, least recently seen first."""
        return list(self._buckets)

    def _resolve(self, key: str) -> str:
        return key if key in self._buckets else OVERFLOW

    def _bucket(self, key: str, now: float) -> str:
        """The key of ``key``'s bucket (made or refilled): its own, or the overflow's."""
        bucket = self._buckets.get(key)
        if bucket is None:
            self._forget_idle(now)
            if len(self._buckets) >= self.max_clients:
                key = OVERFLOW
                bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(self.rate, now)
        self._buckets.move_to_end(key)
        bucket.tokens = min(self.rate, bucket.tokens + (now - bucket.filled) * self.rate)
        bucket.filled = now
        return key

    def _forget_idle(self, now: float) -> None:
        while self._buckets:
            key, oldest = next(iter(self._buckets.items()))
            if now - oldest.filled < self.idle:
                return
            del self._buckets[key]


def client_of(peer: str, span: SpanRecord) -> str:
    """The client a span came from: ``peer service.name/service.instance.id``."""
    name = span.resource.get("service.name", "")
    instance = span.resource.get("service.instance.id", "")
    return f"{peer} {name}/{instance}"


__all__ = ["OVERFLOW", "ClientLimits", "client_of"]
