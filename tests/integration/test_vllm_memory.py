"""The API server's memory from its /metrics (prometheus_client's process collector, the only
memory gauge a released vLLM exports) makes a trend beside npu-smi's HBM and the process
tree's RSS. Served over real HTTP on loopback by a small server whose memory grows."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ascend_doctor.collectors.vllm import VllmCollector
from ascend_doctor.rules import Engine, load_rules

pytestmark = pytest.mark.integration

MIB = 1 << 20


class Server:
    """/health, /metrics (a process whose RSS is ``rss``, started at ``start``), /v1/models."""

    def __init__(self) -> None:
        self.rss = 900 * MIB
        self.start = 1_700_000_000.0

    def metrics(self) -> str:
        return (
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
            "# TYPE process_resident_memory_bytes gauge\n"
            f"process_resident_memory_bytes {float(self.rss)}\n"
            "# HELP process_start_time_seconds Start time of the process since unix epoch in"
            " seconds.\n"
            "# TYPE process_start_time_seconds gauge\n"
            f"process_start_time_seconds {self.start}\n"
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
        )


@pytest.fixture
def server() -> Iterator[tuple[Server, str]]:
    state = Server()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = {
                "/health": "",
                "/metrics": state.metrics(),
                "/v1/models": '{"data": [{"id": "m", "max_model_len": 4096}]}',
            }.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write((body or "").encode())

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


async def test_a_growing_api_server_gets_a_time_to_full(server: tuple[Server, str]) -> None:
    state, url = server
    now = [1000.0]
    collector = VllmCollector(
        url, trend_window=60.0, host_available=lambda: 10_000 * MIB, clock=lambda: now[0]
    )
    seen = []
    for _ in range(4):
        (sample,) = await collector.collect()
        seen.append(sample.values)
        state.rss += 5 * MIB  # 5 MiB every 10 s: steady creep, no step
        now[0] += 10.0
    assert seen[0]["api_rss_bytes"] == 900 * MIB
    assert "api_rss_growth_mb_per_h" not in seen[0]  # one sample is no trend
    last = seen[-1]
    assert last["api_rss_growth_mb_per_h"] == pytest.approx(5 * 360, rel=0.01)  # 1800 MB/h
    # 10 GB free at 0.5 MiB/s
    assert last["api_rss_oom_eta_s"] == pytest.approx(10_000 * MIB / (0.5 * MIB), rel=0.01)


async def test_the_shipped_pack_plans_a_quiet_restart_before_the_host_is_full(
    server: tuple[Server, str],
) -> None:
    state, url = server
    now = [1000.0]
    free = [10_000 * MIB]
    collector = VllmCollector(
        url, trend_window=60.0, host_available=lambda: free[0], clock=lambda: now[0]
    )
    engine = Engine(load_rules())
    found = []
    for _ in range(4):
        (sample,) = await collector.collect()
        found += engine.evaluate([sample])
        state.rss += 5 * MIB
        now[0] += 10.0
    assert found == []  # 10 GB at 1.8 GB/h: more than five hours left
    free[0] = 1_000 * MIB  # about half an hour left at that rate
    (sample,) = await collector.collect()
    (finding,) = engine.evaluate([sample])
    assert finding.rule == "api-server-rss-creep"
    assert finding.category == "memory_creep"


async def test_a_new_api_server_starts_the_trend_over(server: tuple[Server, str]) -> None:
    state, url = server
    now = [1000.0]
    collector = VllmCollector(
        url, trend_window=60.0, host_available=lambda: 10_000 * MIB, clock=lambda: now[0]
    )
    for _ in range(4):
        (sample,) = await collector.collect()
        state.rss += 5 * MIB
        now[0] += 10.0
    assert "api_rss_oom_eta_s" in sample.values
    state.start += 3600.0  # restarted: another process, whose memory is not the old one's
    (sample,) = await collector.collect()
    assert "api_rss_oom_eta_s" not in sample.values
