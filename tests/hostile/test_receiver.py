"""Issue 15, point 3: an OTLP client owns only the spans it sent; it cannot overwrite the
doctor's incident spans by reusing their ids, and a flood of spans is answered 429, to the
flooding client only (spans per second per client)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from ascend_doctor.agent.telemetry.ratelimit import OVERFLOW, ClientLimits
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


def _from(instance: str, n: int) -> bytes:
    spans = [
        {"traceId": "ef" * 16, "spanId": f"{i + 1:016x}", "name": "req", "kind": 2,
         "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
        for i in range(n)
    ]  # fmt: skip
    resource = {
        "attributes": [
            {"key": "service.name", "value": {"stringValue": "vllm"}},
            {"key": "service.instance.id", "value": {"stringValue": instance}},
        ]
    }
    doc = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}
    return json.dumps(doc).encode()


async def test_one_noisy_client_is_limited_alone(tmp_path: Path) -> None:
    """Two real clients on loopback, each on its own connection: the one over its rate gets
    429, the other is still served; the noisy one is served again a second later."""
    store = Store.in_dir(tmp_path)
    receiver = Receiver(store, max_body=1 << 24)
    now = [100.0]
    receiver.limits = ClientLimits(SPANS_PER_SECOND, clock=lambda: now[0])
    host, port = await receiver.start("127.0.0.1", 0)
    url = f"http://{host}:{port}/v1/traces"
    headers = {"content-type": "application/json"}
    burst = int(SPANS_PER_SECOND)
    async with (
        httpx.AsyncClient(trust_env=False) as noisy,
        httpx.AsyncClient(trust_env=False) as quiet,
    ):
        assert (
            await noisy.post(url, content=_from("noisy", burst), headers=headers)
        ).status_code == 200
        r = await noisy.post(url, content=_from("noisy", 1), headers=headers)
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        for _ in range(3):  # the quiet one is not starved by the noisy one's flood
            assert (
                await quiet.post(url, content=_from("quiet", 10), headers=headers)
            ).status_code == 200
            assert (
                await noisy.post(url, content=_from("noisy", 1), headers=headers)
            ).status_code == 429
        now[0] += 1.0
        assert (
            await noisy.post(url, content=_from("noisy", 1), headers=headers)
        ).status_code == 200
    assert receiver.rejected["rate_limited"] == 4
    assert receiver.accepted == burst + 30 + 1
    assert {c.split(" ", 1)[1] for c in receiver.limits.clients} == {"vllm/noisy", "vllm/quiet"}
    await receiver.close()
    store.close()


def test_a_client_inventing_identities_cannot_take_another_clients_bucket() -> None:
    now = [0.0]
    limits = ClientLimits(10, max_clients=4, clock=lambda: now[0])
    quiet = _records("quiet", 1)
    assert limits.admit("127.0.0.1", quiet) is None
    for i in range(50):  # a new service.instance.id for every request
        limits.admit("127.0.0.1", _records(f"forged-{i}", 10))
    assert len(limits.clients) <= 5 and OVERFLOW in limits.clients
    for _ in range(9):  # the quiet client's own bucket is intact: 10 a second
        assert limits.admit("127.0.0.1", quiet) is None
    assert limits.admit("127.0.0.1", quiet) is not None
    now[0] += 61.0  # idle buckets are forgotten, room for new clients again
    assert limits.admit("127.0.0.1", _records("late", 10)) is None
    assert "127.0.0.1 vllm/late" in limits.clients


def _records(instance: str, n: int) -> list[SpanRecord]:
    resource = {"service.name": "vllm", "service.instance.id": instance}
    return [
        SpanRecord("ef" * 16, f"{i + 1:016x}", "", "req", "server", 1, 2, "ok", {}, [], resource,
                   "server", None)
        for i in range(n)
    ]  # fmt: skip
