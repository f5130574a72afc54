"""Telemetry end to end: real doctor processes against the simulated host, a real loopback
OTLP collector decoding with opentelemetry-proto, the real Prometheus endpoint, the real
receiver fed by the fake server's own request spans."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ascend_doctor.cli.demo import free_port
from ascend_doctor.core.store import Store
from ascend_doctor.sim.host import SimHost
from tests.conftest import poll, read_store
from tests.deploy.metric_table import SERIES_LABELS, documented, family_name, scraped
from tests.otlp_collector import Collector, start_collector

pytestmark = pytest.mark.integration

DOCTOR = [sys.executable, "-m", "ascend_doctor"]
RESOURCE_KEYS = (
    "service.name",
    "service.version",
    "service.instance.id",
    "host.name",
    "host.arch",
    "process.pid",
)


@pytest.fixture
def collector() -> Iterator[Collector]:
    col, server = start_collector()
    yield col
    server.shutdown()
    server.server_close()


def doctor_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "OTEL_EXPORTER"))}
    env.update(extra)
    return env


def run_doctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DOCTOR, *args], capture_output=True, text=True, timeout=180, env=env, check=False
    )


def incidents(state: Path) -> list[dict[str, Any]]:
    out = run_doctor("incidents", "--state-dir", str(state), "--json", env=doctor_env())
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.mark.parametrize("scenario", ["kv-cache", "npu-oom", "device-fault"])
def test_each_incident_is_one_trace_at_the_collector_and_in_the_store(
    tmp_path: Path, collector: Collector, scenario: str
) -> None:
    state = tmp_path / "state"
    env = doctor_env(OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint)
    result = run_doctor("demo", "--scenario", scenario, "--state-dir", str(state), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = incidents(state)
    assert rows
    received = collector.spans()  # the doctor flushed at shutdown: all is here
    store = Store.in_dir(state, readonly=True)
    try:
        for inc in rows:
            roots = [
                s
                for s in received
                if s.parent_id == "" and s.attributes.get("incident.id") == inc["id"]
            ]
            assert len(roots) == 1, (inc, [s.name for s in received])
            root = roots[0]
            assert root.name == f"incident {inc['category']}"
            assert root.attributes["incident.state"] == inc["state"]
            assert root.attributes["incident.rule"] == inc["rule"]
            assert root.attributes["incident.subject"] == inc["subject"]
            for key in RESOURCE_KEYS:
                assert key in root.resource, key
            assert root.resource["service.name"] == "ascend-doctor"
            # the 8 simulated NPUs, known from npu-smi even on the doctor's first start
            assert root.resource["hw.id"] == [f"npu{i}" for i in range(8)]
            assert set(root.resource["hw.model"]) == {"Ascend 910B3"}
            assert set(root.resource["hw.type"]) == {"npu"}
            assert all(root.resource["hw.driver_version"])
            trace = [s for s in received if s.trace_id == root.trace_id]
            children = [s for s in trace if s.parent_id == root.span_id]
            assert len(children) == len(trace) - 1  # every span hangs off the root
            names = [c.name for c in children]
            assert "detect" in names
            decisions = [f"remediate.{a['name']}" for a in inc["actions"] if a["name"] != "verify"]
            assert sorted(n for n in names if n.startswith("remediate.")) == sorted(decisions)
            if inc["state"] == "resolved":
                assert names.count("verify") == 1
                verify = next(c for c in children if c.name == "verify")
                assert "1-token completion" in verify.attributes["verify.reason"]
            detect = next(c for c in children if c.name == "detect")
            assert any(e["name"] == "evidence" for e in detect.events)
            # the same spans are in the store
            stored = store.spans(root.trace_id)
            assert {(s.span_id, s.parent_id, s.name) for s in stored} == {
                (s.span_id, s.parent_id, s.name) for s in trace
            }
        # the supervisor's lifecycle is traced too: each start, each exit with its code
        starts = [s for s in received if s.name == "server.start"]
        assert starts and any(s.status_code == 1 for s in starts)  # one became healthy
        assert any(
            "server.exit_code" in s.attributes
            for s in received
            if s.name in ("server.start", "server.run", "server.stop")
        )
    finally:
        store.close()
    shown = run_doctor(
        "incidents", "show", str(rows[0]["id"]), "--state-dir", str(state), env=doctor_env()
    )
    assert shown.returncode == 0, shown.stderr
    assert f"incident {rows[0]['category']}" in shown.stdout and "detect" in shown.stdout
    out = tmp_path / "trace.json"
    exported = run_doctor(
        "traces", "export", "--incident", str(rows[0]["id"]), "-o", str(out),
        "--state-dir", str(state), env=doctor_env(),
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    doc = json.loads(out.read_text())
    spans = [sp for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
    assert {sp["spanId"] for sp in spans} == {
        s.span_id for s in received if s.attributes.get("incident.id") == rows[0]["id"]
    }


def test_dead_endpoint_changes_nothing_and_drops_are_counted(tmp_path: Path) -> None:
    port = free_port()  # nobody listens here for the whole run
    state = tmp_path / "state"
    env = doctor_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}")
    result = run_doctor("demo", "--scenario", "kv-cache", "--state-dir", str(state), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kv-cache       recovered" in result.stdout
    store = Store.in_dir(state, readonly=True)
    try:
        counters = store.meta("telemetry")
        assert counters["spans_dropped"] > 0 and counters["spans_exported"] == 0
        inc = store.incidents()[0]
        assert store.incident_trace_id(inc.id) is not None  # the store exporter went on
    finally:
        store.close()


CONFIG = """
[server]
start_timeout = 60
probe_interval = 0.5
echo = false

[collectors.npu_smi]
interval = 0.5

[collectors.vllm]
interval = 0.5

[telemetry]
endpoint = "{endpoint}"
metrics_interval = 0.5
prometheus = true
prometheus_address = "127.0.0.1:{prom}"

[tracing]
capture_server = true
receiver_address = "127.0.0.1:{receiver}"
receiver_max_bytes = 65536
"""


def post(port: int, body: bytes, ctype: str, *, length: int | None = None) -> int:
    """POST to the receiver; ``length`` claims a different Content-Length (truncation)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        head = (
            f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n"
        )
        s.sendall(head.encode() + body)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


def test_watch_metrics_prometheus_and_the_servers_request_spans(
    tmp_path: Path, collector: Collector
) -> None:
    host = SimHost.create(tmp_path / "host", load_seconds=0.2)
    state = tmp_path / "state"
    prom, receiver, port = free_port(), free_port(), free_port()
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(CONFIG.format(endpoint=collector.endpoint, prom=prom, receiver=receiver))
    argv = host.serve_argv("Qwen/Qwen2.5-7B-Instruct", ["--host", "127.0.0.1", "--port", str(port)])
    env = doctor_env(**host.env())
    cmd = [*DOCTOR, "watch", "--config", str(cfg), "--state-dir", str(state), "--", *argv]
    out = open(tmp_path / "doctor.out", "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        poll(
            lambda: read_store(
                state, lambda s: (m := s.server()) is not None and m.state.value == "RUNNING"
            ),
            60,
            "server RUNNING",
        )
        # metrics of the 8 simulated NPUs over OTLP, in the hardware conventions ...
        poll(
            lambda: len({a["hw.id"] for a, _ in collector.points("hw.npu.memory.usage")}) == 8,
            60,
            "hw.npu.memory.usage of 8 NPUs at the collector",
        )
        for name in ("hw.npu.memory.limit", "hw.npu.temperature", "hw.power", "hw.status"):
            assert len({a["hw.id"] for a, _ in collector.points(name)}) == 8, name
        usage = {a["hw.id"]: a for a, _ in collector.points("hw.npu.memory.usage")}
        assert {a.get("hw.model") for a in usage.values()} == {"Ascend 910B3"}
        # ... with NPU Exporter's labels, read once per chip from npu-smi info -t board
        assert usage["npu5"]["id"] == "5" and usage["npu5"]["model_name"] == "910B3-Ascend-V1"
        assert len({a["vdie_id"] for a in usage.values()}) == 8
        states = {(a["hw.id"], a["hw.state"]): v for a, v in collector.points("hw.status")}
        assert states[("npu0", "ok")] == 1 and states[("npu0", "failed")] == 0
        board_calls = [c for c in host.npu_smi_calls() if "board" in c.get("argv", [])]
        assert len(board_calls) == 8, board_calls  # once per chip, not per collection

        # ... and on the Prometheus endpoint
        def scrape() -> str | None:
            try:
                text = httpx.get(f"http://127.0.0.1:{prom}/metrics", timeout=5).text
            except httpx.HTTPError:
                return None
            ids = {ln.split('hw_id="')[1].split('"')[0] for ln in text.splitlines()
                   if ln.startswith("hw_npu_memory_usage") and 'hw_id="' in ln}  # fmt: skip
            return text if len(ids) == 8 else None

        text = poll(scrape, 60, "8 NPUs on the Prometheus endpoint")
        assert "ascend_doctor_log_lines_total" in text
        # every family a live doctor serves is in docs/telemetry.md's table, with its labels
        rows = {r.prometheus: r.labels for r in documented().values()}
        kinds = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
        for family, labels in scraped(text).items():
            name = family_name(family, kinds[family])
            assert name in rows, name
            assert labels == rows[name] | SERIES_LABELS, (name, labels ^ rows[name])

        # the server's own request spans arrive at the receiver and are stored
        for _ in range(3):
            r = httpx.post(
                f"http://127.0.0.1:{port}/v1/completions",
                json={"model": "Qwen/Qwen2.5-7B-Instruct", "prompt": "hi there", "max_tokens": 4},
                timeout=30,
            )
            assert r.status_code == 200

        def server_spans() -> list[Any] | None:
            def q(s: Store) -> list[Any]:
                return [t for t in s.traces(source="server") if t.name == "llm_request"]

            found = read_store(state, q)
            return found if found and len(found) >= 3 else None

        spans = poll(server_spans, 30, "3 request spans stored")
        attrs = spans[0].attributes
        assert attrs["gen_ai.usage.prompt_tokens"] == 2
        assert attrs["gen_ai.usage.completion_tokens"] == 4
        assert attrs["gen_ai.request.id"].startswith("cmpl-")
        assert attrs["gen_ai.latency.time_to_first_token"] > 0
        assert spans[0].kind == "server" and spans[0].resource["service.name"] == "vllm"
        # each request is one observation in the GenAI histograms
        poll(
            lambda: (
                "gen_ai_server_time_to_first_token_seconds_count"
                in httpx.get(f"http://127.0.0.1:{prom}/metrics", timeout=5).text
            ),
            30,
            "the GenAI histograms",
        )
        served = httpx.get(f"http://127.0.0.1:{prom}/metrics", timeout=5).text.splitlines()
        count = "gen_ai_server_request_duration_seconds_count"
        counts = [ln for ln in served if ln.startswith(count)]
        assert counts and float(counts[0].rsplit(" ", 1)[1]) >= 3, counts
        # forwarded to the collector too
        poll(
            lambda: any(s.name == "llm_request" for s in collector.spans()),
            30,
            "request spans forwarded",
        )

        # garbage, oversized and truncated payloads are rejected without harm
        assert post(receiver, b"\x00\xffnot protobuf", "application/x-protobuf") == 400
        assert post(receiver, b"{not json", "application/json") == 400
        assert post(receiver, b"x" * 70000, "application/x-protobuf") == 400
        assert post(receiver, b"\x0a\x10", "application/x-protobuf", length=100) == 400
        conn = http.client.HTTPConnection("127.0.0.1", receiver, timeout=10)
        conn.request("GET", "/v1/traces")
        assert conn.getresponse().status == 405
        conn.close()
        assert proc.poll() is None  # the daemon goes on
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            json={"model": "Qwen/Qwen2.5-7B-Instruct", "prompt": "again", "max_tokens": 2},
            timeout=30,
        )
        assert r.status_code == 200
        poll(
            lambda: (found := server_spans()) is not None and len(found) >= 4,
            30,
            "a request span after the garbage",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        out.close()
    assert code == 0, (tmp_path / "doctor.out").read_text()
    counters = read_store(state, lambda s: s.meta("telemetry"))
    assert counters is not None
    assert counters["receiver"]["accepted"] >= 4
    assert counters["receiver"]["rejected"] == {
        "malformed": 2,
        "oversized": 1,
        "truncated": 1,
        "method": 1,
    }
