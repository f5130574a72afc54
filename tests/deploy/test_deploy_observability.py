"""deploy/otel-collector.yaml, deploy/alertmanager.yml and deploy/grafana/ascend-doctor.json."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from ascend_doctor.core.events import Category, Outcome, Severity

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ALERT_LABELS = {"alertname", "category", "severity", "host", "device"}


# -- OpenTelemetry Collector -------------------------------------------------------------------


def test_collector_pipelines_are_complete() -> None:
    cfg = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    pipelines = cfg["service"]["pipelines"]
    assert set(pipelines) == {"traces", "metrics"}
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for name, pipe in pipelines.items():
        for kind in used:
            for component in pipe.get(kind, []):
                assert component in cfg[kind], f"pipeline {name} uses undefined {component}"
                used[kind].add(component)
        assert pipe["processors"][0] == "memory_limiter", "memory_limiter must come first"
        assert pipe["processors"][-1] == "batch"
    assert pipelines["traces"]["receivers"] == ["otlp"]
    assert all(e.split("/")[0] == "otlp" for e in pipelines["traces"]["exporters"])
    assert all(e.startswith("prometheus") for e in pipelines["metrics"]["exporters"])
    for kind in ("receivers", "processors"):
        assert set(cfg[kind]) == used[kind], f"{kind} defined but unused"
    # remote write is the documented alternative to the scrape exporter
    assert set(cfg["exporters"]) - used["exporters"] <= {"prometheusremotewrite"}
    for ext in cfg["service"].get("extensions", []):
        assert ext in cfg["extensions"]


def test_collector_receives_what_the_doctors_send() -> None:
    cfg = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    protocols = cfg["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    http_port = int(protocols["http"]["endpoint"].rsplit(":", 1)[1])
    ds = yaml.safe_load((DEPLOY / "kubernetes" / "base" / "daemonset.yaml").read_text())
    env = {
        e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"]).port == http_port
    prom = cfg["exporters"]["prometheus"]
    # host.name becomes the host_name label the dashboard filters by
    assert prom["resource_to_telemetry_conversion"]["enabled"] is True


def _metric_resource_labels(tmp_path: Path) -> set[str]:
    """Labels the Collector's prometheus exporter derives from the doctor's real resource
    (resource_to_telemetry_conversion, after the metrics pipeline's resource processors),
    plus job and instance."""
    from ascend_doctor.agent.telemetry.resource import build_resource
    from ascend_doctor.core.events import Sample
    from ascend_doctor.core.store import Store

    cfg = yaml.safe_load((DEPLOY / "otel-collector.yaml").read_text())
    store = Store.in_dir(tmp_path)
    try:
        npu = Sample("npu_smi", "npu0", 1.0, {"name": "910B3", "driver_version": "24.1.rc2"})
        attrs = dict(build_resource(store, [npu]).attributes)
    finally:
        store.close()
    assert isinstance(attrs["hw.id"], tuple | list)  # the NPUs, as arrays
    for name in cfg["service"]["pipelines"]["metrics"]["processors"]:
        for action in cfg["processors"][name].get("attributes", []):
            if action["action"] == "delete":
                attrs.pop(action["key"], None)
            elif action["action"] in ("upsert", "insert"):
                attrs[action["key"]] = action["value"]
    return {k.replace(".", "_") for k in attrs} | {"job", "instance"}


def test_resource_labels_do_not_clobber_the_points_own(tmp_path: Path) -> None:
    """resource_to_telemetry_conversion lets a resource attribute overwrite a data point's
    attribute of the same name: the metrics pipeline must drop the resource's hw.* arrays,
    or every NPU's hw_id becomes the same list and a host's devices collapse into one series."""
    labels = _metric_resource_labels(tmp_path)
    assert "host_name" in labels
    instruments, _ = _feed()
    point_labels = set().union(*(i.labels for i in instruments.values()))
    assert "hw_id" in point_labels
    assert not labels & point_labels, labels & point_labels
    assert "process_pid" not in labels  # a new series per restart


# -- Alertmanager ------------------------------------------------------------------------------

_MATCHER = re.compile(r'^\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"(.*)"\s*$')


def _matches(matchers: list[str], labels: dict[str, str]) -> bool:
    for m in matchers:
        found = _MATCHER.match(m)
        assert found, m
        name, op, value = found.groups()
        actual = labels.get(name, "")
        ok = {
            "=": actual == value,
            "!=": actual != value,
            "=~": re.fullmatch(value, actual) is not None,
            "!~": re.fullmatch(value, actual) is None,
        }[op]
        if not ok:
            return False
    return True


def _route(node: dict[str, Any], labels: dict[str, str], parent: str) -> list[str]:
    """Alertmanager's routing: first matching child unless ``continue``; else this node."""
    receiver = node.get("receiver", parent)
    out: list[str] = []
    for child in node.get("routes", []):
        if _matches(child.get("matchers", []), labels):
            out.extend(_route(child, labels, receiver))
            if not child.get("continue", False):
                break
    return out or [receiver]


ROUTING = [
    ({"category": "device_fault", "severity": "critical", "device": "npu3"},
     ["pagerduty-ascend-hardware", "slack-ascend-hardware"]),
    ({"category": "hccl_link_error", "severity": "error", "device": "npu1"},
     ["slack-ascend-hardware"]),
    ({"category": "aicore_error", "severity": "info", "device": "npu0"}, ["slack-ascend-hardware"]),
    ({"category": "kv_cache_insufficient", "severity": "critical"},
     ["pagerduty-ascend", "slack-ascend"]),
    ({"category": "npu_oom", "severity": "error"}, ["slack-ascend"]),
    ({"category": "engine_dead", "severity": "warning"}, ["slack-ascend"]),
    ({"category": "server_hang", "severity": "info"}, ["blackhole"]),
]  # fmt: skip


def _alertmanager() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())


@pytest.mark.parametrize(("labels", "receivers"), ROUTING)
def test_route_tree_sends_each_alert_to_its_receivers(
    labels: dict[str, str], receivers: list[str]
) -> None:
    cfg = _alertmanager()
    full = {"alertname": "AscendDoctorIncident", "host": "atlas-01", "device": "", **labels}
    assert _route(cfg["route"], full, cfg["route"]["receiver"]) == receivers


def _walk_matchers(node: dict[str, Any]) -> list[str]:
    out = list(node.get("matchers", []))
    for child in node.get("routes", []):
        out.extend(_walk_matchers(child))
    return out


def test_routes_use_only_the_doctors_labels_and_values() -> None:
    cfg = _alertmanager()
    matchers = _walk_matchers(cfg["route"])
    for rule in cfg.get("inhibit_rules", []):
        matchers += rule["source_matchers"] + rule["target_matchers"]
        assert set(rule["equal"]) <= ALERT_LABELS
    allowed = {
        "category": {c.value for c in Category},
        "severity": {s.label for s in Severity},
    }
    for m in matchers:
        found = _MATCHER.match(m)
        assert found, m
        name, _op, value = found.groups()
        assert name in ALERT_LABELS, m
        if name in allowed:
            assert set(value.split("|")) <= allowed[name], f"{m}: unknown value"
    names = {r["name"] for r in cfg["receivers"]}

    def receivers(node: dict[str, Any]) -> set[str]:
        found = {node["receiver"]} if "receiver" in node else set()
        for child in node.get("routes", []):
            found |= receivers(child)
        return found

    assert receivers(cfg["route"]) == names
    assert set(cfg["route"]["group_by"]) <= ALERT_LABELS
    # secrets stay out of the file
    text = (DEPLOY / "alertmanager.yml").read_text()
    assert "routing_key:" not in text and "api_url:" not in text


def test_amtool_accepts_the_config_and_routes_like_the_table() -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool is not installed (Debian package prometheus-alertmanager)")
    path = str(DEPLOY / "alertmanager.yml")
    proc = subprocess.run(
        [amtool, "check-config", path], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr
    for labels, receivers in ROUTING:
        full = {"alertname": "AscendDoctorIncident", "host": "atlas-01", **labels}
        args = [f"{k}={v}" for k, v in full.items()]
        proc = subprocess.run(
            [amtool, "config", "routes", "test", f"--config.file={path}", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().split(",") == receivers, (labels, proc.stdout)


# -- Grafana -----------------------------------------------------------------------------------


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DEPLOY / "grafana" / "ascend-doctor.json").read_text())
    return data


@dataclass(frozen=True)
class Row:
    """One row of docs/telemetry.md's metric table."""

    otel: str
    unit: str
    collector: str
    """The name through the OpenTelemetry Collector (what the dashboard queries)."""
    doctor: str
    """The name on the doctor's own /metrics."""
    labels: frozenset[str]


def _documented() -> dict[str, Row]:
    """docs/telemetry.md's metric table, by OpenTelemetry name."""
    text = (ROOT / "docs" / "telemetry.md").read_text()
    rows: dict[str, Row] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`") and cells[2].startswith("`"):
            labels = frozenset(x.strip() for x in cells[4].split(",") if x.strip())
            row = Row(cells[0].strip("`"), cells[1], cells[2].strip("`"), cells[3].strip("`"),
                      labels)  # fmt: skip
            assert row.otel not in rows, row.otel
            rows[row.otel] = row
    assert rows, "no metric table in docs/telemetry.md"
    return rows


def _documented_metrics() -> set[str]:
    """Prometheus names through the Collector (the dashboard's), histogram series included."""
    names = set()
    for row in _documented().values():
        names.add(row.collector)
        if row.collector.endswith("_seconds") and "histogram" in _HISTOGRAMS.get(row.otel, ""):
            names |= {row.collector + s for s in ("_bucket", "_sum", "_count")}
    return names


# -- the real instruments ----------------------------------------------------------------------

_DECLARED = re.compile(
    r'\.create_(?:observable_)?(gauge|counter|histogram|up_down_counter)\(\s*"([^"]+)"'
)


def _declared() -> dict[str, str]:
    """Instrument name -> kind, parsed from agent/telemetry/metrics.py's create_* calls."""
    text = (ROOT / "agent" / "telemetry" / "metrics.py").read_text()
    return {name: kind for kind, name in _DECLARED.findall(text)}


_HISTOGRAMS = {n: k for n, k in _declared().items() if k == "histogram"}


@dataclass(frozen=True)
class Instrument:
    """What the SDK exported for one instrument, and its name on the doctor's /metrics."""

    unit: str
    kind: str
    """gauge, counter (monotonic sum), histogram."""
    labels: frozenset[str]


def _feed() -> tuple[dict[str, Instrument], str]:
    """Every instrument DoctorMetrics creates, fed once through the doctor's own feeds; what
    the SDK exports, and the Prometheus text the doctor's endpoint serves for it (the same
    PrometheusMetricReader and registry as agent/telemetry/wiring.py)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        Gauge,
        Histogram,
        InMemoryMetricReader,
        Sum,
    )
    from prometheus_client import CollectorRegistry, generate_latest

    from ascend_doctor.agent.telemetry.metrics import DoctorMetrics
    from ascend_doctor.core.events import ActionResult, Finding, Incident, IncidentState, Role

    registry = CollectorRegistry(auto_describe=True)
    memory = InMemoryMetricReader()
    provider = MeterProvider(
        metric_readers=[memory, PrometheusMetricReader(registry=registry)],
        shutdown_on_exit=False,
    )
    m = DoctorMetrics(provider, lines_read=lambda: 7, spans_dropped=lambda: {"doctor": 1})
    m.sample("npu_smi", "npu0", {"health": "OK", "hbm_used_mb": 1, "hbm_total_mb": 2,
                                 "aicore_pct": 5, "temp_c": 40, "power_w": 90, "name": "910B3",
                                 "driver_version": "24.1.rc2"})  # fmt: skip
    m.sample("vllm", "server", {"health_status": 200, "running": 1, "waiting": 0,
                                "kv_cache_usage": 0.5, "ttft_p99": 0.2,
                                "preemptions_delta": 1})  # fmt: skip
    m.finding(Finding(rule="npu-oom", category=Category("npu_oom"), severity=Severity.ERROR,
                      role=Role.ROOT, subject="npu0", summary="out of memory", at=1.0))  # fmt: skip
    m.action(ActionResult("restart_server", {}, Outcome.OK, "", 1.0))
    m.collector_run("npu_smi", 0.1, ok=False)
    first = Incident(1, Category("server_unresponsive"), "server", IncidentState.OPEN,
                     Severity.CRITICAL, "canary-unanswered-idle", "s", 1.0)  # fmt: skip
    second = dataclasses.replace(first, id=2, opened_at=61.0)
    m.incident(None, first)
    m.incident(None, second)
    m.incident(second, dataclasses.replace(second, state=IncidentState.RESOLVED, resolved_at=90.0))
    m.received_spans.add(1)
    m.rejected.add(1, {"reason": "malformed"})
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


def _collector_name(name: str, unit: str, kind: str) -> str:
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


def _scraped(text: str) -> dict[str, set[str]]:
    """Prometheus text -> metric family name -> label names of its samples."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    out: dict[str, set[str]] = {name: set() for name in types if name != "target_info"}
    for line in text.splitlines():
        found = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", line)
        if line.startswith("#") or found is None:
            continue
        series, labels = found.groups()
        family = next(
            (f for f in out if series in (f, f + "_bucket", f + "_sum", f + "_count")), None
        )
        if family is None:
            continue
        names = set(re.findall(r'(?:^|,)([a-zA-Z_][a-zA-Z0-9_]*)="', labels or ""))
        out[family] |= {n for n in names if not n.startswith("otel_scope_") and n != "le"}
    return out


def test_metric_table_is_what_the_doctor_exports() -> None:
    instruments, text = _feed()
    declared = _declared()
    # every instrument metrics.py creates was fed: a new one cannot go undocumented
    assert set(instruments) == set(declared), set(declared) ^ set(instruments)
    rows = _documented()
    assert set(rows) == set(instruments), set(rows) ^ set(instruments)
    scraped = _scraped(text)
    assert {r.doctor for r in rows.values()} == set(scraped), {
        r.doctor for r in rows.values()
    } ^ set(scraped)
    for name, inst in instruments.items():
        row = rows[name]
        assert row.unit == inst.unit, (name, row.unit, inst.unit)
        assert row.labels == inst.labels, (name, row.labels, inst.labels)
        assert row.collector == _collector_name(name, inst.unit, inst.kind), name
        assert scraped[row.doctor] == set(inst.labels), (name, scraped[row.doctor])
        # the doctor's SDK exporter and the Collector differ only by _ratio on unit-1 gauges
        ratio = inst.unit == "1" and inst.kind == "gauge"
        assert row.collector == row.doctor + ("_ratio" if ratio else ""), name
    assert "npu_hbm_used_bytes" in {r.collector for r in rows.values()}


_PROMQL_WORDS = {
    "sum", "max", "min", "avg", "by", "rate", "increase", "histogram_quantile", "count",
    "without", "and", "or", "unless", "on", "ignoring",
}  # fmt: skip


def _metric_names(expr: str) -> set[str]:
    stripped = re.sub(r'"[^"]*"', '""', expr)  # label values
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)  # ranges
    stripped = re.sub(r"\{[^}]*\}", "", stripped)  # selectors
    stripped = re.sub(r"\b(?:by|without)\s*\([^)]*\)", "", stripped)  # grouping labels
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", stripped))
    return words - _PROMQL_WORDS


def test_dashboard_panels_each_have_a_query() -> None:
    dash = _dashboard()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert {"prometheus", "tempo", "host"} <= set(variables)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = {p["title"] for p in dash["panels"] if p["type"] == "row"}
    assert {"Devices", "Server", "Incidents", "Remediations"} <= titles
    queries = 0
    for panel in dash["panels"]:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        uid = panel["datasource"]["uid"]
        assert uid.startswith("${") and uid[2:-1] in variables
        for target in panel["targets"]:
            text = target.get("expr") or target.get("query")
            assert text and text.strip(), f"panel {panel['title']!r}: empty query"
            for open_, close in ("()", "{}", "[]"):
                assert text.count(open_) == text.count(close), text
            queries += 1
    assert queries >= 15


def test_dashboard_uses_the_documented_metric_names() -> None:
    documented = _documented_metrics()
    assert "npu_hbm_used_bytes" in documented
    used: set[str] = set()
    for panel in _dashboard()["panels"]:
        for target in panel.get("targets", []):
            if "expr" in target:
                used |= _metric_names(target["expr"])
    used.discard("__range")
    assert used and used <= documented, used - documented
    # every device metric issue 7 names is on the dashboard
    for prefix in ("npu_hbm_used", "npu_hbm_limit", "npu_aicore_utilization", "npu_temperature",
                   "npu_power", "npu_health"):  # fmt: skip
        assert any(name.startswith(prefix) for name in used), prefix
    variables = " ".join(json.dumps(v.get("query", "")) for v in _dashboard()["templating"]["list"])
    for metric in re.findall(r"label_values\((\w+)\s*,", variables):
        assert metric in documented, metric


def _label_names(expr: str) -> set[str]:
    stripped = re.sub(r'"[^"]*"', '""', expr)
    names: set[str] = set()
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", stripped):
        names |= {n.strip() for n in group.split(",") if n.strip()}
    for selector in re.findall(r"\{([^}]*)\}", stripped):
        names |= set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", selector))
    return names


def test_dashboard_uses_only_labels_the_series_have(tmp_path: Path) -> None:
    """Every label a query, legend or variable names is an attribute of a documented metric
    or one the Collector makes from the doctor's resource (host_name, ...)."""
    allowed = set().union(*(r.labels for r in _documented().values()))
    allowed |= _metric_resource_labels(tmp_path)
    used: set[str] = set()
    dash = _dashboard()
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            if "expr" in target:
                used |= _label_names(target["expr"])
                used |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
    for var in dash["templating"]["list"]:
        used |= set(re.findall(r"label_values\(\w+\s*,\s*(\w+)\)", json.dumps(var.get("query"))))
    assert {"host_name", "hw_id"} <= used
    assert used <= allowed, used - allowed


def test_dashboard_outcomes_are_real_outcomes() -> None:
    exprs = [t.get("expr", "") for p in _dashboard()["panels"] for t in p.get("targets", [])]
    for expr in exprs:
        for values in re.findall(r'outcome=~"([^"]+)"', expr):
            assert set(values.split("|")) <= {o.value for o in Outcome}
