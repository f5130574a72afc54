"""Loopback HTTP receivers standing in for PagerDuty, Slack, webhooks and Alertmanager, a fake
clock, and a store with an incident to alert on."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ascend_doctor.agent.alerts import AlertListener, Deliverer
from ascend_doctor.core.config import AlertRouteConfig, AlertsConfig, AlertSinkConfig
from ascend_doctor.core.events import Category, Finding, Incident, LogLine, Role, Severity
from ascend_doctor.core.store import Store


@dataclass
class Request:
    """One request a receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A real HTTP server on 127.0.0.1; answers from ``replies`` (status, body, headers) in
    order, then ``default``."""

    default: tuple[int, str] = (202, '{"status":"success"}')
    replies: list[tuple[int, str, dict[str, str]]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                with receiver.lock:
                    receiver.requests.append(
                        Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    if receiver.replies:
                        status, text, headers = receiver.replies.pop(0)
                    else:
                        status, text = receiver.default
                        headers = {}
                    receiver.answers.append(status)
                data = text.encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def fail(self, n: int, status: int = 503, body: str = "down", **headers: str) -> None:
        """The next ``n`` requests get ``status``."""
        with self.lock:
            self.replies.extend([(status, body, headers)] * n)

    def bodies(self) -> list[Any]:
        """JSON bodies of requests that were accepted (2xx)."""
        with self.lock:
            return [
                r.json() for r, s in zip(self.requests, self.answers, strict=True) if 200 <= s < 300
            ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


class FakeClock:
    """Wall time that moves only when told."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def sink(name: str, type_: str, **kw: Any) -> AlertSinkConfig:
    return AlertSinkConfig(name=name, type=type_, **kw)


def alerts_config(
    *sinks: AlertSinkConfig, routes: tuple[AlertRouteConfig, ...] = (), **kw: Any
) -> AlertsConfig:
    kw.setdefault("group_wait", 0.0)
    kw.setdefault("host", "node-7")
    return AlertsConfig(sinks=tuple(sinks), routes=routes, **kw)


@dataclass
class Rig:
    """A store with the alert engine listening and a deliverer on a fake clock."""

    store: Store
    engine: AlertListener
    deliverer: Deliverer
    clock: FakeClock

    async def drain(self, passes: int = 1, step: float = 0.0) -> None:
        for _ in range(passes):
            await self.deliverer.pass_once()
            self.clock.advance(step)


def rig(
    state: Path,
    config: AlertsConfig,
    env: dict[str, str],
    clock: FakeClock | None = None,
) -> Rig:
    clock = clock or FakeClock()
    store = Store.in_dir(state)
    engine = AlertListener(config, store, environ=env, clock=clock)
    store.listeners.append(engine)
    import random

    return Rig(store, engine, Deliverer(engine, clock=clock, rng=random.Random(7)), clock)


def open_incident(
    store: Store,
    category: Category = Category.DEVICE_FAULT,
    severity: Severity = Severity.CRITICAL,
    subject: str = "npu3",
    at: float = 1_800_000_000.0,
    evidence_lines: int = 3,
) -> Incident:
    evidence = tuple(
        LogLine(
            "/var/log/npu/plog-1.log", 100 * i, f"[ERROR] heartbeat lost on device 3 #{i}", i + 1
        )
        for i in range(evidence_lines)
    )
    f = Finding(
        "hccl-heartbeat-lost",
        category,
        severity,
        Role.ROOT,
        subject,
        "NPU 3 lost its heartbeat",
        at=at,
        evidence=evidence,
        path="/var/log/npu/plog-1.log",
        offset=int(at) % 100000,
    )
    inc = store.open_incident(f)
    store.add_finding(f, inc.id)
    return inc


Check = Callable[[Any], bool]
