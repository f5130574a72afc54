"""Telemetry against a real store: one trace per incident, ids kept across a restart,
refused and dry-run decisions as spans, exceptions recorded, OTLP shapes, drops counted."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import MetricExporter

from ascend_doctor.agent.telemetry import Telemetry
from ascend_doctor.agent.telemetry.export import (
    BoundedSpanProcessor,
    Endpoint,
    metric_exporter,
    resolve_endpoint,
)
from ascend_doctor.agent.telemetry.lifecycle import parse_phases
from ascend_doctor.agent.telemetry.span_codec import to_otlp_json, to_otlp_proto
from ascend_doctor.collectors.otlp import from_otlp_json, from_otlp_proto
from ascend_doctor.core.config import Config, TelemetryConfig
from ascend_doctor.core.errors import ConfigError, TelemetryError
from ascend_doctor.core.events import (
    ActionResult,
    Category,
    Finding,
    IncidentState,
    LogLine,
    Outcome,
    Role,
    Severity,
)
from ascend_doctor.core.store import SpanRecord, Store

T0 = 1_700_000_000.0


def finding(at: float = T0, rule: str = "npu-oom") -> Finding:
    return Finding(
        rule=rule,
        category=Category("npu_oom"),
        severity=Severity.CRITICAL,
        role=Role.ROOT,
        subject="npu0",
        summary="NPU out of memory",
        at=at,
        captures={"tried_gib": "2.00"},
        evidence=(LogLine("/var/log/x.log", 10, "RuntimeError: NPU out of memory.", 3),),
        path="/var/log/x.log",
        offset=10,
    )


def telemetry(store: Store, **tc: object) -> Telemetry:
    config = Config(telemetry=dataclasses.replace(TelemetryConfig(), **tc))  # type: ignore[arg-type]
    t = Telemetry(config, store)
    store.listeners.append(t)
    return t


async def close(t: Telemetry, store: Store) -> None:
    await t.close()
    store.listeners.remove(t)


def by_name(spans: list[SpanRecord]) -> dict[str, SpanRecord]:
    return {s.name: s for s in spans}


async def test_incident_is_one_trace_with_detect_remediate_verify(tmp_path: Path) -> None:
    store = Store.in_dir(tmp_path)
    t = telemetry(store)
    inc = store.open_incident(finding())
    store.add_finding(finding(), inc.id)
    store.add_action(inc.id, ActionResult("plan", {}, Outcome.REFUSED, "budget spent", T0 + 1))
    store.add_action(
        inc.id, ActionResult("restart", {"env": {"A": "1"}}, Outcome.DRY_RUN, "dry_run", T0 + 2)
    )
    store.add_action(
        inc.id, ActionResult("restart", {"device": 0}, Outcome.OK, "restarted", T0 + 3)
    )
    store.update_incident(inc.id, state=IncidentState.RESOLVED, resolved_at=T0 + 10)
    await close(t, store)

    trace_id = store.incident_trace_id(inc.id)
    assert trace_id is not None
    spans = store.spans(trace_id)
    root = next(s for s in spans if s.parent_id == "")
    assert root.name == "incident npu_oom"
    assert root.attributes["incident.id"] == inc.id
    assert root.attributes["incident.state"] == "resolved"
    assert root.attributes["incident.rule"] == "npu-oom"
    assert root.attributes["incident.severity"] == "critical"
    assert root.status == "ok"
    assert root.start_ns == int(T0 * 1e9) and root.end_ns == int((T0 + 10) * 1e9)
    assert root.resource["service.name"] == "ascend-doctor"
    children = sorted(
        (s for s in spans if s.parent_id == root.span_id), key=lambda s: (s.start_ns, s.end_ns)
    )
    assert [s.name for s in children] == [
        "detect",
        "remediate.plan",
        "remediate.restart",
        "remediate.restart",
        "verify",
    ]
    assert {s.incident_id for s in spans} == {inc.id}
    detect = children[0]
    assert detect.attributes["finding.capture.tried_gib"] == "2.00"
    assert detect.events[0]["name"] == "evidence"
    assert detect.events[0]["attributes"]["log.record"] == "RuntimeError: NPU out of memory."
    refused, dry, ok = children[1:4]
    assert refused.attributes["remediation.decision"] == "refused"
    assert refused.attributes["remediation.reason"] == "budget spent"
    assert dry.attributes["remediation.decision"] == "dry_run"
    assert json.loads(dry.attributes["remediation.params"]) == {"env": {"A": "1"}}
    assert ok.status == "ok" and ok.attributes["remediation.param.device"] == 0
    assert children[4].attributes["verify.result"] == "healthy"
    store.close()


async def test_a_root_cause_found_after_its_symptom_renames_the_trace(tmp_path: Path) -> None:
    # an unexplained error opens the incident; the OOM line read a moment later is its root
    store = Store.in_dir(tmp_path)
    t = telemetry(store)
    symptom = dataclasses.replace(
        finding(), rule="unrecognised", category=Category("unrecognised"), role=Role.SYMPTOM
    )
    inc = store.open_incident(symptom)
    store.update_incident(inc.id, category=Category("npu_oom"), rule="npu-oom", summary="OOM")
    store.update_incident(inc.id, state=IncidentState.RESOLVED, resolved_at=T0 + 5)
    await close(t, store)
    trace_id = store.incident_trace_id(inc.id)
    assert trace_id is not None
    (root,) = [s for s in store.spans(trace_id) if s.parent_id == ""]
    assert root.name == "incident npu_oom"
    assert root.attributes["incident.category"] == "npu_oom"
    assert root.attributes["incident.rule"] == "npu-oom"
    store.close()


async def test_failed_action_records_the_logged_exception(tmp_path: Path) -> None:
    store = Store.in_dir(tmp_path)
    vdie = "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"
    npu0 = {"health": "OK", "name": "910B3", "model_name": "910B3-Ascend-V1", "vdie_id": vdie}
    store.add_sample("npu_smi", "npu0", T0 - 1, npu0)
    t = telemetry(store)
    inc = store.open_incident(finding())
    try:
        raise RuntimeError("npu-smi vanished")
    except RuntimeError:
        logging.getLogger("ascend_doctor.agent.remediation.remediator").exception("action failed")
    reason = "RuntimeError: npu-smi vanished"
    store.add_action(inc.id, ActionResult("reset_device", {}, Outcome.FAILED, reason, T0 + 1))
    store.update_incident(inc.id, state=IncidentState.ESCALATED, resolved_at=T0 + 2)
    await close(t, store)
    spans = by_name(store.spans(str(store.incident_trace_id(inc.id))))
    failed = spans["remediate.reset_device"]
    assert failed.status == f"error: {reason}"
    (event,) = failed.events
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"] == "RuntimeError"
    assert event["attributes"]["exception.message"] == "npu-smi vanished"
    assert failed.attributes["error.type"] == "RuntimeError"
    root = spans["incident npu_oom"]
    assert root.status.startswith("error: escalated")
    assert root.attributes["error.type"] == "escalated"
    # the device in the hardware conventions, and the chip identity its metric series carry
    assert root.attributes["hw.id"] == "npu0" and root.attributes["hw.model"] == "Ascend 910B3"
    assert root.attributes["vdie_id"] == vdie
    assert root.attributes["model_name"] == "910B3-Ascend-V1"
    assert "verify" not in spans
    store.close()


async def test_restarted_doctor_continues_the_same_trace(tmp_path: Path) -> None:
    store = Store.in_dir(tmp_path)
    t = telemetry(store)
    inc = store.open_incident(finding())
    store.add_finding(finding(), inc.id)
    await close(t, store)  # the doctor stops mid-incident
    first = store.spans(str(store.incident_trace_id(inc.id)))
    root1 = next(s for s in first if s.parent_id == "")
    assert root1.attributes["ascend_doctor.interrupted"] is True
    store.close()

    store = Store.in_dir(tmp_path)
    t = telemetry(store)
    store.add_action(inc.id, ActionResult("restart", {}, Outcome.OK, "restarted", T0 + 3))
    store.update_incident(inc.id, state=IncidentState.RESOLVED, resolved_at=T0 + 9)
    await close(t, store)
    spans = store.spans(root1.trace_id)
    roots = [s for s in spans if s.parent_id == ""]
    assert len(roots) == 1 and roots[0].span_id == root1.span_id
    assert "ascend_doctor.interrupted" not in roots[0].attributes
    assert roots[0].attributes["incident.state"] == "resolved"
    assert {s.name for s in spans if s.parent_id == root1.span_id} == {
        "detect",
        "remediate.restart",
        "verify",
    }
    store.close()


async def test_logs_inside_an_incident_carry_its_trace_id(tmp_path: Path) -> None:
    from ascend_doctor.agent.telemetry import TraceContextFilter

    store = Store.in_dir(tmp_path)
    t = telemetry(store)
    inc = store.open_incident(finding())
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    handler.addFilter(TraceContextFilter())
    logger = logging.getLogger("ascend_doctor.test_telemetry")
    logger.addHandler(handler)
    try:
        with t.incident_context(inc.id):
            logger.warning("inside")
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
    trace_id, span_id = t.incidents.trace_ids(inc.id)
    assert records[0].trace_id == f"{trace_id:032x}"  # type: ignore[attr-defined]
    assert records[0].span_id == f"{span_id:016x}"  # type: ignore[attr-defined]
    assert records[1].trace_id == ""  # type: ignore[attr-defined]
    await close(t, store)
    store.close()


def sample_records() -> list[SpanRecord]:
    return [
        SpanRecord(
            "0af7651916cd43dd8448eb211c80319c",
            "b7ad6b7169203331",
            "",
            "llm_request",
            "server",
            1,
            2,
            "error: boom",
            {"gen_ai.usage.prompt_tokens": 7, "x": [1.5, 2.5], "ok": True},
            [{"name": "e", "time_ns": 1, "attributes": {"k": "v"}}],
            {"service.name": "vllm"},
            "server",
        )
    ]


def test_otlp_proto_and_json_round_trip() -> None:
    records = sample_records()
    assert from_otlp_proto(to_otlp_proto(records).SerializeToString()) == records
    doc = to_otlp_json(records)
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"] == "0af7651916cd43dd8448eb211c80319c"  # hex, not base64
    assert span["startTimeUnixNano"] == "1" and span["kind"] == 2
    assert from_otlp_json(json.dumps(doc).encode()) == records


@pytest.mark.parametrize(
    "body",
    [b"\xff\xfe garbage", b"\x0a\x80\x80\x80\x80\x80"],
    ids=["garbage", "truncated"],
)
def test_proto_decoding_rejects_garbage_and_truncation(body: bytes) -> None:
    with pytest.raises(TelemetryError):
        from_otlp_proto(body)
    full = to_otlp_proto(sample_records()).SerializeToString()
    with pytest.raises(TelemetryError):
        from_otlp_proto(full[: len(full) // 2])


def test_json_decoding_rejects_bad_ids() -> None:
    doc = to_otlp_json(sample_records())
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "zz"
    with pytest.raises(TelemetryError):
        from_otlp_json(json.dumps(doc).encode())
    with pytest.raises(TelemetryError):
        from_otlp_json(b'{"resourceSpans": 3}')


def test_endpoint_from_config_or_standard_variables() -> None:
    assert resolve_endpoint(TelemetryConfig(), {}) is None
    ep = resolve_endpoint(
        TelemetryConfig(),
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/", "OTEL_EXPORTER_OTLP_HEADERS": "a=b%20c"},
    )
    assert ep is not None
    assert (ep.protocol, ep.traces, ep.metrics) == (
        "http/protobuf",
        "http://c:4318/v1/traces",
        "http://c:4318/v1/metrics",
    )
    assert ep.headers == {"a": "b c"}
    assert "b c" not in ep.describe()
    ep = resolve_endpoint(
        TelemetryConfig(endpoint="c:4317", protocol="grpc", headers=("x-token=s",)), {}
    )
    assert ep is not None and (ep.traces, ep.headers) == ("c:4317", {"x-token": "s"})
    with pytest.raises(ConfigError):
        resolve_endpoint(TelemetryConfig(endpoint="c", headers=("novalue",)), {})


def test_processor_counts_drops_when_the_endpoint_is_down() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=0.5)
    proc = BoundedSpanProcessor(exporter, max_queue_size=3, max_batch=100, delay=60)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("t")
    for _ in range(5):
        tracer.start_span("s").end()
    assert proc.dropped == 2  # the queue holds 3
    proc.force_flush()  # the export fails: its batch is dropped too
    assert (proc.dropped, proc.exported) == (5, 0)
    provider.shutdown()


def test_start_phases_from_vllm_lines() -> None:
    text = (
        b"(APIServer pid=1) INFO 11-14 22:13:20 [api_server.py:1839] vLLM API server version\n"
        b"(EngineCore_DP0 pid=1) INFO 11-14 22:13:50 [default_loader.py:267]"
        b" Loading weights took 25.50 seconds\n"
        b"(EngineCore_DP0 pid=1) INFO 11-14 22:13:50 [model_runner_v1.py:2345]"
        b" Loading model weights took 27.5100 GB\n"
        b"(APIServer pid=1) INFO 11-14 22:14:05 [api_server.py:1885]"
        b" Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    )
    p = parse_phases(text, now=T0)
    assert p.first_line is not None and p.weights_loaded is not None and p.api_server
    assert p.weights_loaded - p.first_line == 30
    assert p.api_server - p.weights_loaded == 15
    assert (p.weights_seconds, p.weights_gib) == (25.5, 27.51)


def test_bad_telemetry_config_stops_start_up(tmp_path: Path) -> None:
    from ascend_doctor.core.config_file import load_config

    p = tmp_path / "doctor.toml"
    p.write_text('[telemetry]\nprotocol = "thrift"\n')
    with pytest.raises(ConfigError, match=r"doctor.toml:2: config 'telemetry.protocol'"):
        load_config(p)
    p.write_text('[tracing]\nreceiver_address = "4318"\n')
    store = Store.in_dir(tmp_path)
    with pytest.raises(ConfigError, match=r"'tracing.receiver_address' is '4318'"):
        Telemetry(load_config(p), store)
    store.close()


@pytest.mark.parametrize("only", ["TRACES", "METRICS"])
async def test_one_signal_endpoint_exports_only_that_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, only: str
) -> None:
    """Only OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (or only ..._METRICS_) set: the other signal is
    not exported; the SDK exporter would default to localhost:4318, the doctor's receiver."""
    from ascend_doctor.agent.telemetry import wiring

    made: list[str] = []

    def spy(ep: Endpoint) -> MetricExporter:
        made.append(ep.metrics)
        return metric_exporter(ep)

    monkeypatch.setattr(wiring, "metric_exporter", spy)
    for var in ("ENDPOINT", "TRACES_ENDPOINT", "METRICS_ENDPOINT", "PROTOCOL", "TRACES_PROTOCOL"):
        monkeypatch.delenv(f"OTEL_EXPORTER_OTLP_{var}", raising=False)
    url = f"http://127.0.0.1:9/v1/{only.lower()}"  # discard port: nothing is sent in this test
    monkeypatch.setenv(f"OTEL_EXPORTER_OTLP_{only}_ENDPOINT", url)
    store = Store.in_dir(tmp_path)
    t = telemetry(store)
    await t.start()
    if only == "TRACES":
        assert t.otlp is not None and made == []
    else:
        assert t.otlp is None and made == [url]
    await close(t, store)
    store.close()
