"""MTTR and time between incidents per category, from incidents as the store keeps them, and
as metrics."""

from __future__ import annotations

import dataclasses

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from ascend_doctor.core.events import Category, Incident, IncidentState, Severity
from ascend_doctor.core.incident_stats import CategoryStats, category_stats
from ascend_doctor.metrics.incidents import IncidentMetrics


def incident(n: int, category: Category, opened: float, **kw: object) -> Incident:
    base = Incident(n, category, "server", IncidentState.OPEN, Severity.CRITICAL, "r", "s", opened)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


RESOLVED, ESCALATED = IncidentState.RESOLVED, IncidentState.ESCALATED
HANG, CREEP = Category.SERVER_UNRESPONSIVE, Category.MEMORY_CREEP


def test_mttr_counts_resolved_incidents_and_mtbi_every_one() -> None:
    stats = category_stats(
        [
            incident(1, HANG, 1000.0, state=RESOLVED, resolved_at=1030.0),
            incident(2, CREEP, 1500.0, state=RESOLVED, resolved_at=1600.0),
            incident(3, HANG, 4600.0, state=ESCALATED, resolved_at=4700.0),
            incident(4, HANG, 8200.0, state=RESOLVED, resolved_at=8250.0),
            incident(5, CREEP, 9000.0),
        ]
    )
    assert list(stats) == ["memory_creep", "server_unresponsive"]
    assert stats["server_unresponsive"] == CategoryStats(3, 2, 40.0, 3600.0)
    assert stats["memory_creep"] == CategoryStats(2, 1, 100.0, 7500.0)
    assert category_stats([incident(1, HANG, 5.0)])["server_unresponsive"] == CategoryStats(
        1, 0, None, None
    )


def test_repair_time_and_interval_are_metrics_per_category() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    m = IncidentMetrics(provider.get_meter("t"), budget_per_hour=6)
    first = incident(1, HANG, 1000.0)
    m.changed(None, first)
    m.changed(first, dataclasses.replace(first, state=RESOLVED, resolved_at=1042.0))
    second = incident(2, HANG, 1600.0)
    m.changed(None, second)
    m.changed(second, dataclasses.replace(second, state=ESCALATED, resolved_at=1700.0))
    data = reader.get_metrics_data()
    assert data is not None
    sums = {
        metric.name: [(dict(p.attributes or {}), p.sum, p.count) for p in metric.data.data_points]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name.startswith("ascend_doctor.incidents.")
        and metric.name.split(".")[-1] in ("repair_time", "interval")
    }
    assert sums["ascend_doctor.incidents.repair_time"] == [
        ({"category": "server_unresponsive"}, 42.0, 1)
    ]
    assert sums["ascend_doctor.incidents.interval"] == [
        ({"category": "server_unresponsive"}, 600.0, 1)
    ]
    provider.shutdown()
