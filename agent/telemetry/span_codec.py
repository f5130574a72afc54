"""Spans between their three shapes: the SDK's ``ReadableSpan``, the store's ``SpanRecord``
and OTLP (protobuf messages, and the protobuf JSON mapping with hex ids that collectors,
Jaeger and Tempo load).

Pure functions: no I/O. Decoding raises ``TelemetryError`` on anything that is not a valid
OTLP trace request, so the receiver can answer 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from ascend_doctor.collectors.otlp import KINDS
from ascend_doctor.core.store import SpanRecord

"""OTLP SpanKind number -> the store's kind (0, unspecified, counts as internal)."""
SCOPE = "ascend_doctor"


def record_of(span: ReadableSpan, source: str = "doctor") -> SpanRecord:
    """The store's shape of a finished SDK span; ``incident.id`` gives ``incident_id``."""
    ctx = span.get_span_context()
    assert ctx is not None
    attrs = dict(span.attributes or {})
    incident = attrs.get("incident.id")
    status = span.status
    if status.status_code == StatusCode.ERROR:
        text = f"error: {status.description}" if status.description else "error"
    elif status.status_code == StatusCode.OK:
        text = "ok"
    else:
        text = "unset"
    return SpanRecord(
        trace_id=f"{ctx.trace_id:032x}",
        span_id=f"{ctx.span_id:016x}",
        parent_id=f"{span.parent.span_id:016x}" if span.parent is not None else "",
        name=span.name,
        kind=span.kind.name.lower(),
        start_ns=int(span.start_time or 0),
        end_ns=int(span.end_time or span.start_time or 0),
        status=text,
        attributes=_plain(attrs),
        events=[
            {"name": e.name, "time_ns": int(e.timestamp), "attributes": _plain(e.attributes or {})}
            for e in span.events
        ],
        resource=_plain(span.resource.attributes),
        source=source,
        incident_id=incident if isinstance(incident, int) else None,
    )


def _plain(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()}


# -- OTLP JSON (protobuf JSON mapping; ids in hex, 64-bit integers as strings) ------------------


def _json_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_json_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": _json_attrs(value)}}
    return {"stringValue": str(value)}


def _json_attrs(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _json_value(v)} for k, v in attrs.items()]


def _json_status(status: str) -> dict[str, Any]:
    if status == "ok":
        return {"code": 1}
    if status.startswith("error"):
        return {"code": 2, "message": status.partition(": ")[2]}
    return {}


def to_otlp_json(records: Iterable[SpanRecord]) -> dict[str, Any]:
    """An OTLP/JSON ``ExportTraceServiceRequest`` of stored spans, grouped by resource."""
    groups: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for r in records:
        key = json.dumps(r.resource, sort_keys=True, default=str)
        spans = groups.setdefault(key, (r.resource, []))[1]
        span: dict[str, Any] = {
            "traceId": r.trace_id,
            "spanId": r.span_id,
            "parentSpanId": r.parent_id,
            "name": r.name,
            "kind": max(1, KINDS.index(r.kind)) if r.kind in KINDS else 1,
            "startTimeUnixNano": str(r.start_ns),
            "endTimeUnixNano": str(r.end_ns),
            "attributes": _json_attrs(r.attributes),
            "events": [
                {
                    "timeUnixNano": str(e.get("time_ns", 0)),
                    "name": e.get("name", ""),
                    "attributes": _json_attrs(e.get("attributes") or {}),
                }
                for e in r.events
            ],
            "status": _json_status(r.status),
        }
        spans.append(span)
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _json_attrs(resource)},
                "scopeSpans": [{"scope": {"name": SCOPE}, "spans": spans}],
            }
            for resource, spans in groups.values()
        ]
    }


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list | tuple):
        out = AnyValue()
        out.array_value.values.extend(_any(v) for v in value)
        return out
    if isinstance(value, dict):
        out = AnyValue()
        out.kvlist_value.values.extend(_kvs(value))
        return out
    return AnyValue(string_value=str(value))


def _kvs(attrs: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_any(v)) for k, v in attrs.items()]


def to_otlp_proto(records: Sequence[SpanRecord]) -> ExportTraceServiceRequest:
    """An OTLP protobuf trace request of stored spans (for forwarding)."""
    req = ExportTraceServiceRequest()
    groups: dict[str, trace_pb2.ResourceSpans] = {}
    for r in records:
        key = json.dumps(r.resource, sort_keys=True, default=str)
        rs = groups.get(key)
        if rs is None:
            rs = req.resource_spans.add()
            rs.resource.attributes.extend(_kvs(r.resource))
            rs.scope_spans.add().scope.name = SCOPE
            groups[key] = rs
        sp = rs.scope_spans[0].spans.add()
        sp.trace_id = bytes.fromhex(r.trace_id)
        sp.span_id = bytes.fromhex(r.span_id)
        if r.parent_id:
            sp.parent_span_id = bytes.fromhex(r.parent_id)
        sp.name = r.name
        sp.kind = max(1, KINDS.index(r.kind)) if r.kind in KINDS else 1
        sp.start_time_unix_nano = r.start_ns
        sp.end_time_unix_nano = r.end_ns
        sp.attributes.extend(_kvs(r.attributes))
        for e in r.events:
            ev = sp.events.add()
            ev.name = str(e.get("name", ""))
            ev.time_unix_nano = int(e.get("time_ns", 0))
            ev.attributes.extend(_kvs(e.get("attributes") or {}))
        st = _json_status(r.status)
        if st:
            sp.status.code = st["code"]
            sp.status.message = st.get("message", "")
    return req


__all__ = [
    "record_of",
    "to_otlp_json",
    "to_otlp_proto",
]
