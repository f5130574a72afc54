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

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from ascend_doctor.core.errors import TelemetryError
from ascend_doctor.core.store import SpanRecord

KINDS = ("internal", "internal", "server", "client", "producer", "consumer")
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


def _from_json_value(v: Any) -> Any:
    if not isinstance(v, dict):
        raise TelemetryError("attribute value must be an object")
    if "stringValue" in v:
        return str(v["stringValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "arrayValue" in v:
        return [_from_json_value(x) for x in (v["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in v:
        return _from_json_attrs((v["kvlistValue"] or {}).get("values", []))
    if "bytesValue" in v:
        return str(v["bytesValue"])
    return None


def _from_json_attrs(items: Any) -> dict[str, Any]:
    if not isinstance(items, list):
        raise TelemetryError("attributes must be a list")
    out: dict[str, Any] = {}
    for kv in items:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise TelemetryError("attribute must be an object with a string key")
        out[kv["key"]] = _from_json_value(kv.get("value", {}))
    return out


def _hex_id(value: Any, size: int, what: str, *, empty_ok: bool = False) -> str:
    if value in ("", None) and empty_ok:
        return ""
    if not isinstance(value, str):
        raise TelemetryError(f"{what} must be a hex string")
    raw = bytes.fromhex(value)  # ValueError on non-hex: the caller says "not OTLP"
    if len(raw) != size or not any(raw):
        raise TelemetryError(f"{what} must be {size} non-zero bytes")
    return raw.hex()


def _get(d: Mapping[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    return d.get(camel, d.get(snake, default))


def from_otlp_json(body: bytes, source: str = "server") -> list[SpanRecord]:
    """Spans of an OTLP/JSON trace request; TelemetryError when it is not one."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TelemetryError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise TelemetryError("body must be a JSON object")
    out: list[SpanRecord] = []
    try:
        for rs in _get(doc, "resourceSpans", "resource_spans", []):
            resource = _from_json_attrs((rs.get("resource") or {}).get("attributes", []))
            for ss in _get(rs, "scopeSpans", "scope_spans", []):
                for sp in ss.get("spans", []):
                    status = sp.get("status") or {}
                    code = int(status.get("code", 0) or 0)
                    kind = int(sp.get("kind", 0) or 0)
                    out.append(
                        SpanRecord(
                            trace_id=_hex_id(_get(sp, "traceId", "trace_id"), 16, "traceId"),
                            span_id=_hex_id(_get(sp, "spanId", "span_id"), 8, "spanId"),
                            parent_id=_hex_id(
                                _get(sp, "parentSpanId", "parent_span_id", ""),
                                8,
                                "parentSpanId",
                                empty_ok=True,
                            ),
                            name=str(sp.get("name", "")),
                            kind=KINDS[kind] if 0 <= kind < len(KINDS) else "internal",
                            start_ns=int(_get(sp, "startTimeUnixNano", "start_time_unix_nano", 0)),
                            end_ns=int(_get(sp, "endTimeUnixNano", "end_time_unix_nano", 0)),
                            status=_status_text(code, str(status.get("message", ""))),
                            attributes=_from_json_attrs(sp.get("attributes", [])),
                            events=[
                                {
                                    "name": str(e.get("name", "")),
                                    "time_ns": int(_get(e, "timeUnixNano", "time_unix_nano", 0)),
                                    "attributes": _from_json_attrs(e.get("attributes", [])),
                                }
                                for e in sp.get("events", [])
                            ],
                            resource=resource,
                            source=source,
                        )
                    )
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # int(), fromhex()
        raise TelemetryError(f"not an OTLP trace request: {exc}") from None
    return out


def _status_text(code: int, message: str) -> str:
    if code == 2:
        return f"error: {message}" if message else "error"
    return "ok" if code == 1 else "unset"


# -- OTLP protobuf -----------------------------------------------------------------------------


def _from_any(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "string_value":
        return v.string_value
    if which == "bool_value":
        return v.bool_value
    if which == "int_value":
        return v.int_value
    if which == "double_value":
        return v.double_value
    if which == "array_value":
        return [_from_any(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _from_any(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return None


def _attrs(items: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: _from_any(kv.value) for kv in items}


def _bytes_id(raw: bytes, size: int, what: str, *, empty_ok: bool = False) -> str:
    if not raw and empty_ok:
        return ""
    if len(raw) != size or not any(raw):
        raise TelemetryError(f"{what} must be {size} non-zero bytes")
    return raw.hex()


def from_otlp_proto(body: bytes, source: str = "server") -> list[SpanRecord]:
    """Spans of an OTLP/protobuf trace request; TelemetryError when it is not one (a truncated
    or garbage body fails to parse, or parses into spans without valid ids)."""
    try:
        req = ExportTraceServiceRequest.FromString(body)
    except (DecodeError, RuntimeError) as exc:
        raise TelemetryError(f"not an OTLP protobuf trace request: {exc}") from None
    out: list[SpanRecord] = []
    for rs in req.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for sp in ss.spans:
                out.append(
                    SpanRecord(
                        trace_id=_bytes_id(sp.trace_id, 16, "trace_id"),
                        span_id=_bytes_id(sp.span_id, 8, "span_id"),
                        parent_id=_bytes_id(sp.parent_span_id, 8, "parent_span_id", empty_ok=True),
                        name=sp.name,
                        kind=KINDS[sp.kind] if 0 <= sp.kind < len(KINDS) else "internal",
                        start_ns=sp.start_time_unix_nano,
                        end_ns=sp.end_time_unix_nano,
                        status=_status_text(sp.status.code, sp.status.message),
                        attributes=_attrs(sp.attributes),
                        events=[
                            {
                                "name": e.name,
                                "time_ns": e.time_unix_nano,
                                "attributes": _attrs(e.attributes),
                            }
                            for e in sp.events
                        ],
                        resource=resource,
                        source=source,
                    )
                )
    return out


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
    "from_otlp_json",
    "from_otlp_proto",
    "record_of",
    "to_otlp_json",
    "to_otlp_proto",
]
