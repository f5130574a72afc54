"""The doctor's own Prometheus endpoint, with the names the OpenTelemetry Collector gives.

The SDK's Prometheus exporter and the Collector's (``pkg/translator/prometheus``) agree on
every rule but one: a gauge in unit ``1`` gets ``_ratio`` from the Collector only. The doctor
serves the Collector's name, so that a metric has one name whichever way it is scraped, and
puts ``host.name`` on every series as the Collector's ``resource_to_telemetry_conversion``
does (the rest of the resource stays in ``target_info``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

RATIO_GAUGES = frozenset({"hw_npu_utilization"})
"""Gauges in unit ``1`` (as the SDK names them): served with ``_ratio``."""

RESOURCE_LABELS = frozenset({"host.name"})
"""Resource attributes copied onto every series."""


class _CollectorNames(Collector):
    """The SDK reader's families, renamed where the Collector's rules say otherwise."""

    def __init__(self, inner: CollectorRegistry, ratio: Iterable[str]) -> None:
        self.inner = inner
        self.ratio = frozenset(ratio)

    def collect(self) -> Iterator[Metric]:
        for family in self.inner.collect():
            if family.type == "gauge" and family.name in self.ratio:
                renamed = Metric(family.name + "_ratio", family.documentation, family.type)
                for s in family.samples:
                    renamed.add_sample(
                        family.name + "_ratio" + s.name[len(family.name) :],
                        s.labels,
                        s.value,
                        s.timestamp,
                        s.exemplar,
                    )
                yield renamed
            else:
                yield family


def prometheus_reader() -> tuple[Any, CollectorRegistry]:
    """The SDK's reader and the registry to serve (``generate_latest(registry)``)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    inner = CollectorRegistry(auto_describe=True)
    reader = PrometheusMetricReader(
        registry=inner, resource_attribute_filter=lambda key: key in RESOURCE_LABELS
    )
    served = CollectorRegistry(auto_describe=False)
    served.register(_CollectorNames(inner, RATIO_GAUGES))
    return reader, served


__all__ = ["RATIO_GAUGES", "RESOURCE_LABELS", "prometheus_reader"]
