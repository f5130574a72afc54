"""docs/telemetry.md's metric table, the instruments the doctor really creates, and the
Prometheus names and labels both ways (the doctor's endpoint, the Collector's rules): what the
dashboard, the alert rules and the live tests are checked against."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
METRICS = ROOT / "metrics"

DEVICE_LABELS = frozenset(
    {"hw_id", "hw_type", "hw_model", "hw_driver_version", "id", "model_name", "vdie_id"}
)
"""What ``dev`` stands for in the table."""

SERIES_LABELS = frozenset({"host_name"})
"""Labels every series has on the doctor's endpoint and through the Collector."""

KINDS = {"gauge": "gauge", "counter": "counter", "up-down counter": "updowncounter",
         "histogram": "histogram"}  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One row of docs/telemetry.md's metric table."""

    otel: str
    kind: str
    """gauge, counter, updowncounter, histogram."""
    unit: str
    prometheus: str
    """The one Prometheus name (doctor's endpoint and Collector alike)."""
    labels: frozenset[str]


def documented() -> dict[str, Row]:
    """docs/telemetry.md's metric table, by OpenTelemetry name."""
    text = (ROOT / "docs" / "telemetry.md").read_text()
    rows: dict[str, Row] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`") and cells[3].startswith("`"):
            labels: set[str] = set()
            for x in cells[4].split(","):
                x = x.strip()
                labels |= DEVICE_LABELS if x == "dev" else {x} if x else set()
            row = Row(cells[0].strip("`"), KINDS[cells[1]], cells[2], cells[3].strip("`"),
                      frozenset(labels))  # fmt: skip
            assert row.otel not in rows, row.otel
            rows[row.otel] = row
    assert rows, "no metric table in docs/telemetry.md"
    return rows


def documented_series() -> set[str]:
    """Every Prometheus series name, histograms' ``_bucket``/``_sum``/``_count`` included."""
    names = set()
    for row in documented().values():
        names.add(row.prometheus)
        if row.kind == "histogram":
            names |= {row.prometheus + s for s in ("_bucket", "_sum", "_count")}
    return names


_CREATE = re.compile(r"create_(?:observable_)?(gauge|counter|histogram|up_down_counter)")


def declared() -> dict[str, str]:
    """Instrument name -> kind, as the metrics modules create them: DoctorMetrics built on a
    meter that records every ``create_*`` call (however the module's code reaches it)."""
    from opentelemetry.sdk.metrics import MeterProvider

    from ascend_doctor.metrics.doctor import DoctorMetrics

    out: dict[str, str] = {}

    class Recording:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, attr: str) -> Any:
            real = getattr(self.inner, attr)
            kind = _CREATE.fullmatch(attr)
            if kind is None:
                return real

            def create(name: str, *args: Any, **kwargs: Any) -> Any:
                assert name not in out, name
                out[name] = kind.group(1).replace("_", "")
                return real(name, *args, **kwargs)

            return create

    provider = MeterProvider(shutdown_on_exit=False)

    class Provider:
        def get_meter(self, *args: Any, **kwargs: Any) -> Any:
            return Recording(provider.get_meter(*args, **kwargs))

    DoctorMetrics(Provider())  # type: ignore[arg-type]
    provider.shutdown()
    return out


@dataclass(frozen=True)
class Instrument:
    """What the SDK exported for one instrument."""

    unit: str
    kind: str
    """gauge, counter (monotonic sum), updowncounter, histogram."""
    labels: frozenset[str]


ECC = {"hbm_ecc_single_bit_errors": 3, "hbm_ecc_double_bit_errors": 1,
       "hbm_ecc_single_bit_total": 5, "hbm_ecc_double_bit_total": 1,
       "hbm_ecc_single_bit_isolated_pages": 0, "hbm_ecc_double_bit_isolated_pages": 1}  # fmt: skip
"""npu-smi's ECC counters of a card with one uncorrectable error."""


def feed() -> tuple[dict[str, Instrument], str]:
    """Every instrument DoctorMetrics creates, fed once through the doctor's own feeds; what
    the SDK exports, and the Prometheus text the doctor's endpoint serves for it (the reader
    and registry of metrics/prom.py, as the daemon uses them)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader, Sum
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import generate_latest

    from ascend_doctor.core.events import (
        ActionResult,
        Category,
        Finding,
        Incident,
        IncidentState,
        Outcome,
        ProcessEvent,
        ProcessState,
        Role,
        Severity,
    )
    from ascend_doctor.core.store_spans import SpanRecord
    from ascend_doctor.metrics.doctor import DoctorMetrics
    from ascend_doctor.metrics.prom import prometheus_reader

    reader, registry = prometheus_reader()
    memory = InMemoryMetricReader()
    provider = MeterProvider(
        resource=Resource.create({"host.name": "atlas-01"}),
        metric_readers=[memory, reader],
        shutdown_on_exit=False,
    )
    m = DoctorMetrics(provider, lines_read=lambda: 7, spans_dropped=lambda: {"doctor": 1})
    vdie = "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"
    npu0 = {"health": "Critical", "health_error_code": "80E01801", "hbm_used_mb": 1,
            "hbm_total_mb": 2, "aicore_pct": 5, "temp_c": 40, "power_w": 90, "name": "910B3",
            "driver_version": "24.1.rc2", "model_name": "910B3-Ascend-V1", "vdie_id": vdie,
            **ECC}  # fmt: skip
    m.sample("npu_smi", "npu0", npu0)
    # an uncorrectable ECC error since the last sample: one more of the card's errors
    m.sample("npu_smi", "npu0", {**npu0, "hbm_ecc_double_bit_total": 2})
    m.sample("vllm", "server", {"health_status": 200, "health_latency_ms": 3.0})
    m.finding(Finding(rule="npu-oom", category=Category("npu_oom"), severity=Severity.ERROR,
                      role=Role.ROOT, subject="npu0", summary="out of memory", at=1.0,
                      path="/var/log/vllm/server.log"))  # fmt: skip
    m.action(ActionResult("restart_server", {}, Outcome.OK, "", 1.0))
    m.collector_run("npu_smi", 0.1, ok=False)
    m.received_spans.add(1)
    m.rejected.add(1, {"reason": "malformed"})
    opened = Incident(1, Category("device_fault"), "npu0", IncidentState.OPEN,
                      Severity.CRITICAL, "npu-smi-health-not-ok", "npu0 Critical", 1.0)  # fmt: skip
    m.incident(None, opened)
    m.incident(opened, dataclasses.replace(opened, state=IncidentState.ESCALATED))
    again = dataclasses.replace(opened, id=2, opened_at=61.0)  # a time between incidents
    m.incident(None, again)
    m.incident(again, dataclasses.replace(again, state=IncidentState.RESOLVED, resolved_at=90.0))
    m.process_event(ProcessEvent(ProcessState.STARTING, ProcessState.STOPPED, 1.0))
    m.process_event(ProcessEvent(ProcessState.EXITED, ProcessState.RUNNING, 2.0, crashed=True))
    m.request_spans([SpanRecord("a" * 32, "b" * 16, "", "llm_request", "server", 0, 1, "unset",
                                {"gen_ai.latency.e2e": 0.5,
                                 "gen_ai.latency.time_to_first_token": 0.05,
                                 "gen_ai.latency.time_in_model_decode": 0.3,
                                 "gen_ai.usage.completion_tokens": 4,
                                 "gen_ai.request.model": "Qwen/Qwen2.5-7B-Instruct",
                                 "gen_ai.response.model": "Qwen/Qwen2.5-7B-Instruct"},
                                [], {}, "server")])  # fmt: skip
    data = memory.get_metrics_data()
    text = generate_latest(registry).decode()
    provider.shutdown()
    assert data is not None
    out: dict[str, Instrument] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                d = metric.data
                if isinstance(d, Gauge):
                    kind = "gauge"
                elif isinstance(d, Sum):
                    kind = "counter" if d.is_monotonic else "updowncounter"
                else:
                    assert isinstance(d, Histogram), metric.name
                    kind = "histogram"
                keys = {k for p in d.data_points for k in (p.attributes or {})}
                labels = frozenset(k.replace(".", "_") for k in keys)
                out[metric.name] = Instrument(metric.unit or "", kind, labels)
    return out, text


# pkg/translator/prometheus in opentelemetry-collector-contrib (normalize_name.go): the
# prometheus and prometheusremotewrite exporters' names with suffixes on (their default)
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "Cel": "celsius", "W": "watts",
          "1": "", "%": "percent", "Hz": "hertz"}  # fmt: skip


def collector_name(name: str, unit: str, kind: str) -> str:
    """The Prometheus name the OpenTelemetry Collector gives an instrument."""
    tokens = [t for t in re.split(r"[^A-Za-z0-9]+", name) if t]
    main = unit.split("/", 1)[0].strip()
    if main and "{" not in main and "}" not in main:
        prom = "_".join(t for t in re.split(r"[^A-Za-z0-9]+", _UNITS.get(main, main)) if t)
        if prom and prom not in tokens:
            tokens.append(prom)
    if kind == "counter":
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if unit == "1" and kind == "gauge":
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    return "_".join(tokens)


def scraped(text: str) -> dict[str, set[str]]:
    """Prometheus text -> metric family name -> label names of its samples (without the
    scope's and ``le``)."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    out: dict[str, set[str]] = {name: set() for name in types if name != "target_info"}
    for line in text.splitlines():
        found = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", line)
        if line.startswith("#") or found is None:
            continue
        series, labels = found.groups()
        suffixes = ("", "_total", "_bucket", "_sum", "_count")
        family = next((f for f in out if series in {f + x for x in suffixes}), None)
        if family is None:
            continue
        names = set(re.findall(r'(?:^|,)([a-zA-Z_][a-zA-Z0-9_]*)="', labels or ""))
        out[family] |= {n for n in names if not n.startswith("otel_scope_") and n != "le"}
    return out


def family_name(family: str, kind: str) -> str:
    """The series name of a scraped family as Prometheus stores it (``# TYPE x counter``
    has samples ``x_total``)."""
    return family + "_total" if kind == "counter" and not family.endswith("_total") else family
