"""The server's request spans as vLLM exports them over OTLP (``--otlp-traces-endpoint``):
OTLP/JSON and OTLP/protobuf trace requests decoded into :class:`SpanRecord`.

Pure parsing, no I/O: the receiver (``agent/telemetry/receiver.py``) is the HTTP side, and it
answers 400 to whatever these functions reject with a TelemetryError (bad JSON, a truncated
protobuf, ids that are not 16/8 non-zero bytes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from ascend_doctor.core.errors import TelemetryError
from ascend_doctor.core.store import SpanRecord

KINDS = ("internal", "internal", "server", "client", "producer", "consumer")
"""OTLP span kinds by their number (0, unspecified, reads as internal)."""


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


__all__ = ["KINDS", "from_otlp_json", "from_otlp_proto"]
