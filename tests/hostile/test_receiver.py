"""Issue 15, point 3: an OTLP client owns only the spans it sent; it cannot overwrite the
doctor's incident spans by reusing their ids, and a flood of spans is answered 429."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from ascend_doctor.agent.telemetry.receiver import SPANS_PER_SECOND, Receiver
from ascend_doctor.core.store import SpanRecord, Store

TRACE, SPAN = "ab" * 16, "cd" * 8


def _doctor_span() -> SpanRecord:
    return SpanRecord(TRACE, SPAN, "", "incident 1", "internal", 1, 2, "ok",
                      {"incident.id": 1}, [], {}, "doctor", 1)  # fmt: skip


def _otlp(n: int, span_id: str | None = None) -> bytes:
    spans = [
        {
            "traceId": TRACE,
            "spanId": span_id or f"{i + 1:016x}",
            "name": "forged",
            "kind": 2,
            "startTimeUnixNano": "1",
            "endTimeUnixNano": "2",
        }
        for i in range(n)
    ]
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()


async def test_a_client_cannot_overwrite_the_doctors_spans_nor_flood(tmp_path: Path) -> None:
    store = Store.in_dir(tmp_path)
    store.add_spans([_doctor_span()])
    receiver = Receiver(store, max_body=1 << 24)
    host, port = await receiver.start("127.0.0.1", 0)
    url = f"http://{host}:{port}/v1/traces"
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(trust_env=False) as client:
        r = await client.post(url, content=_otlp(1, SPAN), headers=headers)
        assert r.status_code == 200
        (kept,) = [s for s in store.spans(TRACE) if s.span_id == SPAN]
        assert (kept.name, kept.source, kept.incident_id) == ("incident 1", "doctor", 1)
        r = await client.post(url, content=_otlp(int(SPANS_PER_SECOND) + 1), headers=headers)
        assert r.status_code == 429 and receiver.rejected["rate_limited"] == 1
    await receiver.close()
    store.close()
