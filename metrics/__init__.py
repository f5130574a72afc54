"""The fleet's names for what the doctor measures: OpenTelemetry instruments for every NPU
(hardware conventions, NPU Exporter's labels), the server as the doctor sees it, the
incidents and the remediation budget, the doctor itself; and the Prometheus bridge that serves
them under the same names the OpenTelemetry Collector gives them (docs/telemetry.md).

Pure instruments: they are fed events and samples and know nothing of the daemon, which
holds a ``DoctorMetrics`` (agent/telemetry/wiring.py).
"""

from __future__ import annotations

from ascend_doctor.metrics.doctor import DoctorMetrics

__all__ = ["DoctorMetrics"]
