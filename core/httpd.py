"""A minimal HTTP/1.1 server on asyncio streams, for the OTLP receiver and the Prometheus
scrape endpoint (so neither needs a thread nor a web framework).

It reads a request line, headers (bounded), and a body by Content-Length or chunked
encoding, with a size limit and a read timeout; keep-alive is honoured. Anything it cannot
parse is answered 400 and the connection closed. A handler's exception is answered 500 and
never leaves the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ascend_doctor.core.errors import ConfigError, TelemetryError

log = logging.getLogger(__name__)

HEAD_LIMIT = 64 * 1024
READ_TIMEOUT = 10.0
"""Seconds a client has to send a whole request (head and body) once it starts one."""
IDLE_TIMEOUT = 30.0
"""Seconds a kept-alive connection may wait for its next request."""
MAX_CONNECTIONS = 64
"""Open connections served at once; more are closed at once and counted: a local user holding
a thousand half-sent requests must not take the doctor's file descriptors."""
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    500: "Internal Server Error",
}


class BadRequest(TelemetryError):
    """The request cannot be read; answered 400 (``reason`` says why, for counting)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Request:
    """One parsed request."""

    method: str
    path: str
    headers: dict[str, str]
    """Lower-cased names."""
    body: bytes = b""
    peer: str = ""
    """The client's address (no port: a client opens a new connection at will)."""


@dataclass
class Response:
    """What a handler answers."""

    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]
Rejected = Callable[[str], None]


def parse_address(address: str, what: str) -> tuple[str, int]:
    """``host:port`` -> (host, port); ValueError with the key name otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"config '{what}' is {address!r}: expected host:port")
    return host.strip("[]"), int(port)


class HttpServer:
    """Serves one handler on one address."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_body: int,
        on_reject: Rejected = lambda reason: None,
        name: str = "http",
        max_connections: int = MAX_CONNECTIONS,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self.handler = handler
        self.max_body = max_body
        self.max_connections = max_connections
        self.read_timeout = read_timeout
        self.on_reject = on_reject
        self.name = name
        self.server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; returns the bound (host, port) (port 0 picks a free one)."""
        self.server = await asyncio.start_server(self._serve, host, port, limit=HEAD_LIMIT)
        sock = self.server.sockets[0].getsockname()
        return str(sock[0]), int(sock[1])

    async def close(self) -> None:
        """Stop listening and drop open connections."""
        if self.server is not None:
            self.server.close()
            for task in list(self._conns):
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._conns) >= self.max_connections:
            self.on_reject("too_many_connections")
            writer.transport.abort()  # no answer: answering could block on a slow reader
            return
        if task is not None:
            self._conns.add(task)
        try:
            while True:
                # the first byte may take the idle time, the rest of the request the read
                # time: a client trickling bytes cannot hold its slot for long
                try:
                    async with asyncio.timeout(IDLE_TIMEOUT):
                        first = await reader.read(1)
                    if not first:
                        return
                    async with asyncio.timeout(self.read_timeout):
                        req = await self._read(reader, first)
                except BadRequest as exc:
                    self.on_reject(exc.reason)
                    await self._write(writer, Response(400, f"{exc}\n".encode()), close=True)
                    return
                except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
                    return
                if req is None:
                    return
                req.peer = str((writer.get_extra_info("peername") or ("",))[0])
                try:
                    resp = await self.handler(req)
                except Exception:  # a handler's bug is a 500, never the daemon's problem
                    log.exception("%s: handler failed", self.name)
                    resp = Response(500, b"internal error\n")
                close = req.headers.get("connection", "").lower() == "close"
                await self._write(writer, resp, close=close)
                if close:
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read(self, reader: asyncio.StreamReader, first: bytes = b"") -> Request | None:
        try:
            head = first + await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise BadRequest("truncated", "truncated request head") from None
            return None  # the client closed between requests
        except asyncio.LimitOverrunError:
            raise BadRequest("oversized", "request head too large") from None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise BadRequest("malformed", "malformed request line")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep or not name.strip():
                raise BadRequest("malformed", "malformed header")
            headers[name.strip().lower()] = value.strip()
        body = await self._body(reader, headers)
        if headers.get("content-encoding", "").lower() == "gzip":
            body = self._gunzip(body)
        return Request(parts[0].upper(), parts[1], headers, body)

    async def _body(self, reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await self._chunked(reader)
        raw = headers.get("content-length", "0")
        if not raw.isdigit():
            raise BadRequest("malformed", "bad Content-Length")
        length = int(raw)
        if length > self.max_body:
            raise BadRequest("oversized", f"body of {length} bytes over the {self.max_body} limit")
        try:
            return await reader.readexactly(length)
        except asyncio.IncompleteReadError:
            raise BadRequest("truncated", "body shorter than its Content-Length") from None

    async def _chunked(self, reader: asyncio.StreamReader) -> bytes:
        out = bytearray()
        try:
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip() or b"x", 16)
                if len(out) + size > self.max_body:
                    raise BadRequest("oversized", f"body over the {self.max_body} limit")
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers supported
                    return bytes(out)
                out += await reader.readexactly(size)
                if await reader.readexactly(2) != b"\r\n":
                    raise BadRequest("malformed", "bad chunk end")
        except ValueError:
            raise BadRequest("malformed", "bad chunk size") from None
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            raise BadRequest("truncated", "truncated chunked body") from None

    def _gunzip(self, body: bytes) -> bytes:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(body, self.max_body + 1)
        except zlib.error:
            raise BadRequest("malformed", "bad gzip body") from None
        if len(out) > self.max_body or d.unconsumed_tail:
            raise BadRequest("oversized", f"body over the {self.max_body} limit unzipped")
        if not d.eof:
            raise BadRequest("truncated", "truncated gzip body")
        return out

    async def _write(self, writer: asyncio.StreamWriter, resp: Response, *, close: bool) -> None:
        head = [
            f"HTTP/1.1 {resp.status} {REASONS.get(resp.status, 'Status')}",
            f"Content-Type: {resp.content_type}",
            f"Content-Length: {len(resp.body)}",
            *(f"{k}: {v}" for k, v in resp.headers.items()),
        ]
        if close:
            head.append("Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + resp.body)
        # a client that never reads its answer must not hold its slot for ever
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(self.read_timeout):
                await writer.drain()


__all__ = ["BadRequest", "HttpServer", "Request", "Response", "parse_address"]
