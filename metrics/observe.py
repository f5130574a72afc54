"""Observable instruments read from a snapshot: one helper for every "last value" metric.

The SDK calls an observable instrument's callback on whichever thread collects (the OTLP
reader's own, or a Prometheus scrape), so a callback must only read what the daemon's loop
replaces whole (an immutable snapshot, a dict copied before it is walked) and never wait.
Each such metric here is a function that returns ``(value, attributes)`` pairs from that
snapshot; :func:`observe` registers it under the right instrument kind, so the callbacks and
their ``Observation`` plumbing are written once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum

from opentelemetry.metrics import CallbackOptions, Meter, Observation

Point = tuple[float, Mapping[str, str]]
"""One observed value and its attributes."""
Read = Callable[[], Iterable[Point]]
"""Reads the current points from a snapshot; called by the metric reader, on its thread."""


class Kind(StrEnum):
    """Which observable instrument: the OpenTelemetry rules for what may be summed."""

    GAUGE = "gauge"
    """A value that is not added across series (a temperature, a lag)."""
    UP_DOWN = "up_down"
    """An additive value that goes up and down (memory in use, 1/0 state flags)."""
    COUNTER = "counter"
    """A monotonic total kept elsewhere (lines read)."""


def observe(
    meter: Meter,
    name: str,
    read: Read,
    *,
    unit: str,
    description: str,
    kind: Kind = Kind.GAUGE,
) -> None:
    """Register ``name`` as an observable ``kind`` whose points are what ``read`` returns."""

    def callback(options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(value, dict(attrs)) for value, attrs in read()]

    if kind == Kind.GAUGE:
        meter.create_observable_gauge(name, [callback], unit=unit, description=description)
    elif kind == Kind.UP_DOWN:
        meter.create_observable_up_down_counter(
            name, [callback], unit=unit, description=description
        )
    else:
        meter.create_observable_counter(name, [callback], unit=unit, description=description)


def one(value: float) -> list[Point]:
    """A single point without attributes."""
    return [(value, {})]


__all__ = ["Kind", "Point", "Read", "observe", "one"]
