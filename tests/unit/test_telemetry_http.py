"""The receiver's HTTP/1.1 reader on real loopback sockets: keep-alive, chunked and gzip
bodies, and the limits (oversized, truncated, malformed answered 400 and counted)."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from pathlib import Path

from ascend_doctor.agent.telemetry.receiver import Receiver
from ascend_doctor.agent.telemetry.span_codec import to_otlp_json, to_otlp_proto
from ascend_doctor.core.store import Store
from tests.unit.test_telemetry import sample_records


async def exchange(port: int, raw: bytes) -> list[int]:
    """Send raw bytes, half-close, and return the status of every response."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    writer.write_eof()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def request(body: bytes, ctype: str, *extra: str) -> bytes:
    head = ["POST /v1/traces HTTP/1.1", "Host: x", f"Content-Type: {ctype}", *extra]
    if not any(h.lower().startswith("transfer-encoding") for h in extra):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(body: bytes, size: int = 7) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def test_keep_alive_chunked_gzip_and_limits(tmp_path: Path) -> None:
    store = Store.in_dir(tmp_path)
    receiver = Receiver(store, max_body=4096)
    _, port = await receiver.start("127.0.0.1", 0)
    try:
        proto = to_otlp_proto(sample_records()).SerializeToString()
        as_json = json.dumps(to_otlp_json(sample_records())).encode()
        # two requests on one connection, the second chunked, then a gzip one
        statuses = await exchange(
            port,
            request(proto, "application/x-protobuf")
            + request(chunked(as_json), "application/json", "Transfer-Encoding: chunked")
            + request(gzip.compress(proto), "application/x-protobuf", "Content-Encoding: gzip"),
        )
        assert statuses == [200, 200, 200]
        assert receiver.accepted == 3
        assert len(store.traces(source="server")) == 1  # the same span three times, kept once
        # a gzip bomb over the limit, a chunked body over it, a bad request line, a cut body
        bomb = gzip.compress(b"\0" * 100_000)
        assert await exchange(
            port, request(bomb, "application/x-protobuf", "Content-Encoding: gzip")
        ) == [400]
        big = chunked(b"x" * 5000, 1000)
        assert await exchange(
            port, request(big, "application/json", "Transfer-Encoding: chunked")
        ) == [400]
        assert await exchange(port, b"HELLO\r\n\r\n") == [400]
        cut = request(proto, "application/x-protobuf")[:-5]
        assert await exchange(port, cut) == [400]
        assert await exchange(port, request(b"", "text/plain")) == [415]
        assert dict(receiver.rejected) == {
            "oversized": 2,
            "malformed": 1,
            "truncated": 1,
            "content_type": 1,
        }
    finally:
        await receiver.close()
        store.close()
