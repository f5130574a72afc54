"""The metrics' behaviour: device states and fault codes, incidents as counters, the budget,
the server's lifecycle and request histograms, the one Prometheus name per metric."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from ascend_doctor.agent.telemetry import Telemetry
from ascend_doctor.collectors.npu_smi_format import board_identity, parse_pairs
from ascend_doctor.core.config import Config, RemediationConfig, TelemetryConfig
from ascend_doctor.core.events import (
    Category,
    Finding,
    Incident,
    IncidentState,
    ProcessEvent,
    ProcessState,
    Role,
    Severity,
)
from ascend_doctor.core.records import BudgetEntry, Ledger
from ascend_doctor.core.store import SpanRecord, Store
from ascend_doctor.metrics.devices import fault_codes, join_labels
from ascend_doctor.metrics.doctor import DoctorMetrics

Points = dict[str, list[tuple[dict[str, Any], Any]]]


@pytest.fixture
def metrics() -> Iterator[tuple[DoctorMetrics, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    yield DoctorMetrics(provider, budget_per_hour=3), reader
    provider.shutdown()


def points(reader: InMemoryMetricReader) -> Points:
    out: Points = {}
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for p in metric.data.data_points:
                    value = p if isinstance(p, HistogramDataPoint) else p.value
                    out.setdefault(metric.name, []).append((dict(p.attributes or {}), value))
    return out


NPU = {"hbm_used_mb": 1024, "hbm_total_mb": 65536, "aicore_pct": 50, "temp_c": 40,
       "power_w": 90.5, "name": "910B3", "driver_version": "24.1.rc2"}  # fmt: skip


def test_device_states_and_values(metrics: tuple[DoctorMetrics, InMemoryMetricReader]) -> None:
    m, reader = metrics
    for n, health in enumerate(["OK", "Warning", "Alarm", "Critical", "UNKNOWN"]):
        m.sample("npu_smi", f"npu{n}", {**NPU, "health": health})
    p = points(reader)
    status = {(a["hw.id"], a["hw.state"]): v for a, v in p["hw.status"]}
    assert len(status) == 5 * 3
    on = sorted(k for k, v in status.items() if v == 1)
    assert on == [("npu0", "ok"), ("npu1", "degraded"), ("npu2", "degraded"), ("npu3", "failed")]
    assert all(a["hw.type"] == "npu" for a, _ in p["hw.status"])
    usage = {a["hw.id"]: (a, v) for a, v in p["hw.npu.memory.usage"]}
    attrs, value = usage["npu0"]
    assert value == 1024 * 1024 * 1024
    assert attrs["hw.model"] == "Ascend 910B3" and attrs["id"] == "0"
    assert p["hw.npu.utilization"][0][1] == 0.5
    assert p["hw.power"][0][1] == 90.5 and p["hw.npu.temperature"][0][1] == 40
    # a later sample replaces the values: npu3 recovered
    m.sample("npu_smi", "npu3", {**NPU, "health": "OK"})
    status = {(a["hw.id"], a["hw.state"]): v for a, v in points(reader)["hw.status"]}
    assert status[("npu3", "ok")] == 1 and status[("npu3", "failed")] == 0


def test_a_fault_code_counts_each_time_it_appears(
    metrics: tuple[DoctorMetrics, InMemoryMetricReader],
) -> None:
    m, reader = metrics
    bad = {**NPU, "health": "Critical", "health_error_code": "80E01801"}
    m.sample("npu_smi", "npu3", bad)
    m.sample("npu_smi", "npu3", bad)  # still there: the same fault
    m.sample("npu_smi", "npu3", {**NPU, "health": "OK"})
    m.sample("npu_smi", "npu3", bad)  # back again: a second one
    m.sample("npu_smi", "npu3", {**bad, "health_error_code": "80E01801 80E18005"})
    errors = {a["error.type"]: v for a, v in points(reader)["hw.errors"]}
    assert errors == {"80E01801": 2, "80E18005": 1}


def test_log_faults_about_a_device_count_as_its_errors(
    metrics: tuple[DoctorMetrics, InMemoryMetricReader],
) -> None:
    m, reader = metrics
    m.sample("npu_smi", "npu1", {**NPU, "health": "OK", "vdie_id": "A-B", "model_name": "x"})

    def found(subject: str, path: str, rule: str = "hbm-ecc") -> Finding:
        return Finding(rule=rule, category=Category("device_fault"), severity=Severity.CRITICAL,
                       role=Role.ROOT, subject=subject, summary="s", at=1.0, path=path)  # fmt: skip

    m.finding(found("npu1", "/var/log/npu/slog/device-1.log"))
    m.finding(found("server", "/var/lib/ascend-doctor/server.log", "engine-dead"))  # no device
    m.finding(found("npu1", "", "npu-smi-health-not-ok"))  # from a sample: counted by its code
    p = points(reader)
    errors = [(a["hw.id"], a["error.type"], a["vdie_id"], v) for a, v in p["hw.errors"]]
    assert errors == [("npu1", "hbm-ecc", "A-B", 1)]
    assert sum(v for _, v in p["ascend_doctor.findings"]) == 3


def test_ecc_counters_are_gauges_and_each_new_uncorrectable_one_an_error(
    metrics: tuple[DoctorMetrics, InMemoryMetricReader],
) -> None:
    m, reader = metrics
    ecc = {"hbm_ecc_single_bit_errors": 4, "hbm_ecc_double_bit_errors": 0,
           "hbm_ecc_single_bit_total": 9, "hbm_ecc_double_bit_total": 1,
           "hbm_ecc_single_bit_isolated_pages": 0,
           "hbm_ecc_double_bit_isolated_pages": 1}  # fmt: skip
    m.sample("npu_smi", "npu2", {**NPU, "health": "OK", **ecc})
    m.sample("npu_smi", "npu2", {**NPU, "health": "OK", **ecc, "hbm_ecc_double_bit_total": 3})
    p = points(reader)

    def by_type(name: str) -> dict[str, Any]:
        return {a["ecc_type"]: v for a, v in p[name] if a["hw.id"] == "npu2"}

    assert by_type("hw.npu.hbm.ecc.errors") == {"single_bit": 4, "double_bit": 0}
    assert by_type("hw.npu.hbm.ecc.errors.aggregate") == {"single_bit": 9, "double_bit": 3}
    assert by_type("hw.npu.hbm.ecc.isolated_pages") == {"single_bit": 0, "double_bit": 1}
    # the first sample is where counting starts; the rise from 1 to 3 is two errors
    errors = {a["error.type"]: v for a, v in p["hw.errors"]}
    assert errors == {"hbm_ecc_double_bit": 2}


def test_fault_codes_and_join_labels() -> None:
    assert fault_codes("NA") == frozenset() and fault_codes(None) == frozenset()
    assert fault_codes("80E01801, 80E18005") == {"80E01801", "80E18005"}
    assert join_labels("npu3", {}) == {"id": "3"}
    assert join_labels("npu3.1", {"phy_id": 7})["id"] == "7"  # A3: the Chip Phy-ID column
    assert "id" not in join_labels("npu3.1", {})  # the second chip of an NPU: no guess


def test_board_identity_in_npu_exporters_form() -> None:
    # npu-smi info -i 0 -c 0 -t board as printed in Ascend/mind-cluster
    # docs/en/faultdiag/user_guide/03_collecting_logs.md
    text = """\
        NPU ID                         : 0
        Chip ID                        : 0
        Chip Type                      : Ascend
        Chip Name                      : 910A
        Chip Version                   : V1
        Board ID                       : 0x02
        PCB ID                         : NA
        BOM ID                         : 1
        VDie ID                        : 42C711D4 20B03704 4A10C8D4 14CC040A D2102003
        NDie ID                        : 27216594 20401010 4E10C8D4 14CC040A A4102003
        Chip Position ID               : 0
        PCIe Bus Info                  : 0000:61:00.0
        Firmware Version               : 7.1.0.7.220
"""
    assert board_identity(parse_pairs(text)) == {
        "model_name": "910A-Ascend-V1",
        "vdie_id": "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003",
    }
    assert board_identity({"Chip Name": "910B3", "VDie ID": "NA"}) == {}
    assert board_identity({"VDie ID": "not hex words"}) == {}


def _incident(state: IncidentState, **kw: Any) -> Incident:
    return Incident(7, Category("device_fault"), "npu3", state, Severity.CRITICAL, "r", "s", 1.0,
                    **kw)  # fmt: skip


def test_incidents_are_counters_and_the_active_ones_a_gauge(
    metrics: tuple[DoctorMetrics, InMemoryMetricReader],
) -> None:
    m, reader = metrics
    opened = _incident(IncidentState.OPEN)
    m.incident(None, opened)
    mitigating = dataclasses.replace(opened, state=IncidentState.MITIGATING)
    m.incident(opened, mitigating)
    escalated = dataclasses.replace(opened, state=IncidentState.ESCALATED)
    m.incident(mitigating, escalated)
    p = points(reader)
    assert [v for _, v in p["ascend_doctor.incidents"]] == [1]
    assert p["ascend_doctor.incidents.ended"] == [
        ({"category": "device_fault", "severity": "critical", "state": "escalated"}, 1)
    ]
    active = {a["state"]: v for a, v in p["ascend_doctor.incidents.active"]}
    assert active == {"open": 0, "mitigating": 0, "escalated": 1}
    # an operator acknowledges it: nothing needs attention any more
    m.incident(escalated, dataclasses.replace(escalated, acknowledged=True))
    active = {a["state"]: v for a, v in points(reader)["ascend_doctor.incidents.active"]}
    assert set(active.values()) == {0}
    assert [v for _, v in points(reader)["ascend_doctor.incidents.ended"]] == [1]


def test_budget_remaining_follows_the_ledger_hour(
    metrics: tuple[DoctorMetrics, InMemoryMetricReader],
) -> None:
    m, reader = metrics
    now = [10_000.0]
    m.incidents._clock = lambda: now[0]
    m.incidents.budget_used([now[0] - 4000, now[0] - 100, now[0] - 10])
    assert points(reader)["ascend_doctor.remediation.budget.remaining"] == [({}, 1)]
    m.incidents.budget_used([now[0] - 300, now[0] - 100, now[0] - 10])
    assert points(reader)["ascend_doctor.remediation.budget.remaining"] == [({}, 0)]
    now[0] += 3400  # the oldest step leaves the hour
    assert points(reader)["ascend_doctor.remediation.budget.remaining"] == [({}, 1)]


def test_server_lifecycle_probe_and_request_histograms(
    metrics: tuple[DoctorMetrics, InMemoryMetricReader],
) -> None:
    m, reader = metrics
    for state, prev in ((ProcessState.STARTING, ProcessState.STOPPED),
                        (ProcessState.RUNNING, ProcessState.STARTING),
                        (ProcessState.EXITED, ProcessState.RUNNING),
                        (ProcessState.STARTING, ProcessState.EXITED)):  # fmt: skip
        m.process_event(ProcessEvent(state, prev, 1.0, crashed=state == ProcessState.EXITED))
    m.sample("vllm", "server", {"health_status": 200, "health_latency_ms": 4.0})
    m.sample("vllm", "server", {"health_status": 0, "health_latency_ms": 5000.0})
    span = SpanRecord("a" * 32, "b" * 16, "", "llm_request", "server", 0, 1, "unset",
                      {"gen_ai.latency.e2e": 1.5, "gen_ai.latency.time_to_first_token": 0.07,
                       "gen_ai.latency.time_in_model_decode": 1.0,
                       "gen_ai.usage.completion_tokens": 11,
                       "gen_ai.response.model": "Qwen/Qwen2.5-7B-Instruct"},
                      [], {}, "server")  # fmt: skip
    m.request_spans([span, dataclasses.replace(span, name="other")])
    p = points(reader)
    state = {a["state"]: v for a, v in p["ascend_doctor.server.state"]}
    assert state["STARTING"] == 1 and sum(state.values()) == 1 and len(state) == 7
    assert p["ascend_doctor.server.starts"] == [({}, 2)]
    assert p["ascend_doctor.server.exits"] == [({"crashed": "true"}, 1)]
    probes = {a["outcome"]: h.count for a, h in p["ascend_doctor.server.probe.duration"]}
    assert probes == {"ok": 1, "failed": 1}
    ((attrs, ttft),) = p["gen_ai.server.time_to_first_token"]
    assert attrs == {"gen_ai.provider.name": "vllm",
                     "gen_ai.response.model": "Qwen/Qwen2.5-7B-Instruct"}  # fmt: skip
    assert ttft.count == 1 and ttft.sum == 0.07
    # the conventions' bucket boundaries, not the SDK's millisecond defaults
    assert ttft.explicit_bounds[:3] == (0.001, 0.005, 0.01)
    ((_, tpot),) = p["gen_ai.server.time_per_output_token"]
    assert tpot.sum == pytest.approx(0.1)
    assert p["gen_ai.server.request.duration"][0][1].sum == 1.5


async def test_telemetry_seeds_open_incidents_and_the_budget(tmp_path: Path) -> None:
    """A restarted doctor still shows the escalated incident it left and the budget it used
    (read through the doctor's own Prometheus registry)."""
    from prometheus_client import generate_latest

    store = Store.in_dir(tmp_path)
    f = Finding(rule="r", category=Category("device_fault"), severity=Severity.CRITICAL,
                role=Role.ROOT, subject="npu3", summary="s", at=1.0)  # fmt: skip
    inc = store.open_incident(f)
    store.update_incident(inc.id, state=IncidentState.ESCALATED, resolved_at=2.0)
    store.set_ledger(Ledger(history=(BudgetEntry(time.time() - 10, "device_fault"),)))
    config = Config(
        remediation=RemediationConfig(budget_per_hour=4),
        telemetry=TelemetryConfig(prometheus=True),
    )
    t = Telemetry(config, store)
    t._build()
    t._seed()
    text = generate_latest(t.prom_registry).decode()
    await t.close()
    store.close()
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    active = [ln for ln in lines if ln.startswith("ascend_doctor_incidents_active{")]
    assert len(active) == 1 and 'state="escalated"' in active[0]
    assert active[0].endswith(" 1.0") and 'category="device_fault"' in active[0]
    budget = [ln for ln in lines if ln.startswith("ascend_doctor_remediation_budget_remaining")]
    assert len(budget) == 1 and budget[0].endswith(" 3.0")
