"""OpenTelemetry for the doctor: one trace per incident, the server's lifecycle as traces,
metrics for every device, the server and the doctor, and the server's own request traces
received beside them.

``Telemetry`` is what the daemon holds: a store listener (so every writer is seen the same
way), ``start()``/``close()`` in the daemon's loop, and a few hooks. Without an OTLP endpoint
only the store exporter runs.
"""

from __future__ import annotations

from ascend_doctor.agent.telemetry.logctx import TraceContextFilter
from ascend_doctor.agent.telemetry.wiring import Telemetry

__all__ = ["Telemetry", "TraceContextFilter"]
