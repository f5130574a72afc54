"""The npu_smi collector against the simulator's npu-smi and small real scripts."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from ascend_doctor.agent.daemon import Daemon
from ascend_doctor.collectors.npu_smi import NpuSmiCollector
from ascend_doctor.core.config import CollectorsConfig, Config, LogsConfig, NpuSmiConfig
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.store import Store
from ascend_doctor.rules import load_rules
from ascend_doctor.sim.host import SimHost
from tests.conftest import wait_for

pytestmark = pytest.mark.integration


async def test_unhealthy_device_gets_its_health_detail(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host")
    host.inject(3, "heartbeat_lost")
    collector = NpuSmiCollector(str(host.bin_dir / "npu-smi"), timeout=10)
    samples = {s.subject: s.values for s in await collector.collect()}
    assert len(samples) == 8
    assert samples["npu3"]["health"] == "Alarm"  # a lost TS heartbeat (80FA4E00)
    assert samples["npu3"]["health_error_code"] not in (None, "NA")
    assert "health_error_code" not in samples["npu2"]  # healthy cards cost one call only
    health_calls = [c for c in host.npu_smi_calls() if "health" in c["argv"]]
    assert [c["argv"][-4:] for c in health_calls] == [["-i", "3", "-c", "0"]]


async def test_garbage_is_counted_and_kept(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host")
    host.set_npu_smi_mode("garbage")
    collector = NpuSmiCollector(str(host.bin_dir / "npu-smi"), timeout=10)
    for _ in range(2):
        with pytest.raises(CollectorError, match="npu-smi info"):
            await collector.collect()
    assert collector.parse_failures == 2
    assert collector.last_raw.strip()


def fake_npu_smi(tmp_path: Path, text: str) -> Path:
    script = tmp_path / "npu-smi"
    script.write_text(f"#!/bin/sh\necho '{text}'\nexit 255\n")
    script.chmod(0o755)
    return script


async def test_dcmi_code_becomes_a_finding_once(tmp_path: Path) -> None:
    script = fake_npu_smi(tmp_path, "dcmi module initialize failed. ret is -8005")
    config = Config(
        logs=LogsConfig(cann=False),
        collectors=CollectorsConfig(npu_smi=NpuSmiConfig(path=str(script), interval=0.05)),
    )
    daemon = Daemon(config, tmp_path / "state", None, load_rules(), base_env=dict(os.environ))
    run = asyncio.create_task(daemon.run())
    await wait_for(lambda: daemon.collector_failures.get("npu_smi", 0) >= 3, what="three runs")
    daemon.shutdown()
    assert await asyncio.wait_for(run, 10) == 0
    store = Store.in_dir(tmp_path / "state", readonly=True)
    try:
        rules = [f.finding.rule for f in store.findings()]
        (inc,) = store.incidents()
        status = store.collectors()["npu_smi"]
    finally:
        store.close()
    assert rules == ["dcmi-init-failed-8005"]  # once, not once per run
    assert inc.category.value == "device_unavailable"
    assert status.last_error == "npu-smi info: dcmi error -8005"
    assert status.runs >= 3 and status.failures >= 3 and status.last_duration_s > 0
    assert "-8005" in status.last_raw  # what npu-smi said, kept for whoever reads it


async def test_usages_when_configured(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host")
    collector = NpuSmiCollector(str(host.bin_dir / "npu-smi"), timeout=10, usages=True)
    samples = {s.subject: s.values for s in await collector.collect()}
    assert isinstance(samples["npu0"]["hbm_usage_rate_pct"], int)
    assert "aivector_usage_rate_pct" in samples["npu7"]


async def test_vllm_collector_on_the_simulated_server(tmp_path: Path) -> None:
    import subprocess

    import httpx

    from ascend_doctor.cli.demo import free_port
    from ascend_doctor.collectors.vllm import VllmCollector

    host = SimHost.create(tmp_path / "host", load_seconds=0.1)
    port = free_port()
    argv = host.serve_argv("Qwen/Qwen2.5-7B-Instruct", ["--host", "127.0.0.1", "--port", str(port)])
    server = subprocess.Popen(
        argv, env={**os.environ, **host.env()}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        collector = VllmCollector(url, timeout=5)

        async def healthy() -> bool:
            (s,) = await collector.collect()
            return bool(s.values["health_status"] == 200)

        deadline = asyncio.get_running_loop().time() + 30
        while not await healthy():
            assert asyncio.get_running_loop().time() < deadline, "server never healthy"
            await asyncio.sleep(0.1)
        async with httpx.AsyncClient(trust_env=False) as client:
            body = {"model": "Qwen/Qwen2.5-7B-Instruct", "prompt": "hi " * 40, "max_tokens": 8}
            assert (await client.post(url + "/v1/completions", json=body, timeout=10)).is_success
        (sample,) = await collector.collect()
        v = sample.values
        assert v["health_status"] == 200 and v["max_model_len"] > 0
        assert v["generation_tokens_delta"] == 8 and v["prompt_tokens_delta"] == 40
        assert v["cache_block_size"] == "128" and "ttft_p99" in v
        # the API server's own memory, from prometheus_client's process collector
        assert v["api_rss_bytes"] > 1 << 20 and v["api_started_at"] > 0
    finally:
        server.terminate()
        server.wait(timeout=10)
