"""A real Prometheus scraping a live ``watch`` on the simulated host.

Debian's ``prometheus`` (installed by ``.ci/run``) runs on loopback with a temporary config
and storage and the shipped alert rules; the doctor supervises the fake server with
``[telemetry] prometheus = true``; an NPU fails. The test asks Prometheus's HTTP API for the
device, server and incident series and for the alerts, and lints the endpoint with
``promtool check metrics``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ascend_doctor.cli.demo import free_port
from ascend_doctor.sim.host import SimHost
from ascend_doctor.sim.npu_smi_format import vdie_id
from tests.conftest import poll, read_store

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "ascend-doctor.rules.yml"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="prometheus/promtool not installed (Debian package prometheus; .ci/run installs it)",
)

DOCTOR_CONFIG = """
[server]
start_timeout = 60
probe_interval = 0.5
echo = false

[collectors.npu_smi]
interval = 0.5

[collectors.vllm]
interval = 0.5

[telemetry]
prometheus = true
prometheus_address = "127.0.0.1:{port}"
"""

PROMETHEUS_CONFIG = """
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {rules}
scrape_configs:
  - job_name: ascend-doctor
    static_configs:
      - targets: ["127.0.0.1:{doctor}"]
"""


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A Prometheus on loopback; yields its URL and the port it scrapes the doctor on."""
    assert PROMETHEUS is not None
    doctor_port, port = free_port(), free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(PROMETHEUS_CONFIG.format(rules=RULES, doctor=doctor_port))
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        poll(lambda: _ready(url, proc), 60, "Prometheus ready")
        yield url, doctor_port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _ready(url: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "prometheus exited"
    try:
        return httpx.get(url + "/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """Instant query; the result vector (labels in ``metric``, ``[time, "value"]``)."""
    r = httpx.get(url + "/api/v1/query", params={"query": promql}, timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def found(url: str, promql: str, n: int = 1) -> list[dict[str, Any]] | None:
    """The result when it has at least ``n`` series (for ``poll``)."""
    result = query(url, promql)
    return result if len(result) >= n else None


@needs_prometheus
def test_prometheus_scrapes_the_fleet_names_and_fires_the_rules(
    tmp_path: Path, prometheus: tuple[str, int]
) -> None:
    url, doctor_port = prometheus
    host = SimHost.create(tmp_path / "host", load_seconds=0.2)
    state = tmp_path / "state"
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(DOCTOR_CONFIG.format(port=doctor_port))
    port = free_port()
    argv = host.serve_argv("Qwen/Qwen2.5-7B-Instruct", ["--host", "127.0.0.1", "--port", str(port)])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASCEND_", "OTEL_"))}
    env.update(host.env())
    cmd = [sys.executable, "-m", "ascend_doctor", "watch", "--config", str(cfg),
           "--state-dir", str(state), "--", *argv]  # fmt: skip
    out = open(tmp_path / "doctor.out", "wb")
    doctor = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # the server, as the doctor supervises it
        running = poll(
            lambda: found(url, 'ascend_doctor_server_state{state="RUNNING"} == 1'),
            90,
            "the server RUNNING in Prometheus",
        )
        assert running[0]["metric"]["job"] == "ascend-doctor"
        assert query(url, "ascend_doctor_server_starts_total")[0]["value"][1] == "1"
        assert poll(lambda: found(url, "ascend_doctor_server_probe_duration_seconds_count"),
                    30, "the probe histogram")  # fmt: skip

        # the 8 NPUs, with NPU Exporter's labels
        usage = poll(lambda: found(url, "hw_npu_memory_usage_bytes", 8), 30, "8 NPUs")
        labels = {s["metric"]["hw_id"]: s["metric"] for s in usage}
        assert sorted(labels) == sorted(f"npu{i}" for i in range(8))
        for i in range(8):
            m = labels[f"npu{i}"]
            assert m["id"] == str(i)
            assert m["model_name"] == "910B3-Ascend-V1"
            assert m["vdie_id"] == vdie_id({"id": i}).replace(" ", "-")
            assert m["hw_type"] == "npu" and m["host_name"]
        ok = query(url, 'hw_status{hw_state="ok"} == 1')
        assert len(ok) == 8
        assert len(query(url, "hw_npu_utilization_ratio")) == 8

        # an NPU fails: its status, its fault code as a counter, an incident
        host.inject(3, "hbm_ecc")
        failed = poll(lambda: found(url, 'hw_status{hw_id="npu3", hw_state="failed"} == 1'),
                      30, "npu3 failed")  # fmt: skip
        assert failed[0]["metric"]["vdie_id"] == labels["npu3"]["vdie_id"]
        assert query(url, 'hw_status{hw_id="npu3", hw_state="ok"}')[0]["value"][1] == "0"
        errors = poll(
            lambda: found(url, 'hw_errors_total{hw_id="npu3", error_type="80E01801"}'),
            30,
            "the fault code counted",
        )
        assert float(errors[0]["value"][1]) >= 1
        poll(
            lambda: found(url, 'ascend_doctor_incidents_total{category="device_fault"}'),
            60,
            "the device_fault incident counted",
        )
        # device resets are off by default: the doctor escalates and says so
        escalated = poll(
            lambda: found(url, 'ascend_doctor_incidents_active{state="escalated"} == 1'),
            90,
            "an escalated incident open",
        )
        assert escalated[0]["metric"]["category"] == "device_fault"
        assert query(url, 'ascend_doctor_findings_total{category="device_fault"}')
        assert query(url, 'ascend_doctor_remediations_total{outcome="refused"}')

        # the shipped rules see the same series
        wanted = {"AscendNpuUnhealthy", "AscendIncidentEscalated", "AscendNpuErrors"}
        alerts = poll(
            lambda: _alerts(url, wanted),
            60,
            "the rules' alerts",
        )
        unhealthy = alerts["AscendNpuUnhealthy"]["labels"]
        assert unhealthy["device"] == "npu3" and unhealthy["severity"] == "critical"
        assert unhealthy["category"] == "device_fault" and unhealthy["host"]

        # promtool lints what the endpoint serves
        assert PROMTOOL is not None
        text = httpx.get(f"http://127.0.0.1:{doctor_port}/metrics", timeout=10).content
        lint = subprocess.run(
            [PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=60
        )
        assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), (
            lint.stdout + lint.stderr
        ).decode()
        assert b"vllm_" not in text  # vLLM's own metrics are vLLM's to serve
    finally:
        doctor.send_signal(signal.SIGTERM)
        code = doctor.wait(timeout=60)
        out.close()
    assert code == 0, (tmp_path / "doctor.out").read_text()
    assert read_store(state, lambda s: s.incidents())


def _alerts(url: str, names: set[str]) -> dict[str, dict[str, Any]] | None:
    r = httpx.get(url + "/api/v1/alerts", timeout=10)
    assert r.status_code == 200, r.text
    alerts = {a["labels"]["alertname"]: a for a in r.json()["data"]["alerts"]}
    return alerts if names <= set(alerts) else None
