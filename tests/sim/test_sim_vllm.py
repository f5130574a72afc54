"""The fake vllm serve: start-up refusals, endpoints, and run-time deaths."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable

from simhost_support import ServerRun

from ascend_doctor.sim.host import SimHost

KV_ERROR = (
    "ValueError: To serve at least one request with the models's max seq len (32768), "
    "(6.00 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(2.89 GiB). Based on the available memory, the estimated maximum model length is 15783. "
    "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
    "the engine."
)
QWEN14 = "Qwen/Qwen2.5-14B-Instruct"
Serve = Callable[..., ServerRun]


def test_too_large_max_model_len_is_refused(serve: Serve, host: SimHost) -> None:
    run = serve(QWEN14, ["--max-model-len", "32768", "--gpu-memory-utilization", "0.5"])
    assert run.wait() == 1
    out = run.output()
    error_lines = [line for line in out.splitlines() if KV_ERROR in line]
    assert len(error_lines) == 1
    assert error_lines[0].startswith("(EngineCore_DP0 pid=")
    assert " ERROR " in error_lines[0]
    assert "Failed core proc(s): {'EngineCore_DP0': 1}" in out
    assert host.device(0)["health"] == "OK"
    assert json.loads(host.state_path.read_text())["processes"] == []


def test_serves_and_stops_gracefully(serve: Serve, host: SimHost) -> None:
    run = serve(QWEN14, ["--max-model-len", "16384", "--some-unknown-flag"])
    run.wait_healthy()
    c = run.client
    assert c.get(f"{run.base}/v1/models").json()["data"][0]["max_model_len"] == 16384
    assert c.get(f"{run.base}/version").json() == {"version": "0.11.0"}
    done = c.post(
        f"{run.base}/v1/completions",
        json={"model": QWEN14, "prompt": "one two three", "max_tokens": 4},
    )
    assert done.status_code == 200
    assert done.json()["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    metrics = c.get(f"{run.base}/metrics").text
    assert f'vllm:prompt_tokens_total{{engine="0",model_name="{QWEN14}"}} 3.0' in metrics
    assert 'vllm:cache_config_info{block_size="128"' in metrics
    assert "vllm:time_to_first_token_seconds_bucket" in metrics
    procs = host.state_path.read_text()
    assert str(run.proc.pid) in procs
    time.sleep(0.4)  # one stats interval
    run.proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    assert run.wait() == 0
    assert time.monotonic() - t0 < 1.0
    out = run.output()
    for text in (
        "vLLM API server version 0.11.0",
        "Ignoring unsupported arguments: ['--some-unknown-flag']",
        "Loading model weights took 27.5100 GB",
        "Available KV cache memory: 29.77 GiB",
        "GPU KV cache size: 162,560 tokens",
        "Maximum concurrency for 16,384 tokens per request: 9.92x",
        f"Starting vLLM API server 0 on http://127.0.0.1:{run.port}",
        "Application startup complete.",
        "Engine 000: Avg prompt throughput:",
        "Shutting down FastAPI HTTP server.",
    ):
        assert text in out, text
    assert str(run.proc.pid) not in host.state_path.read_text()


def test_npu_oom_kills_the_engine_and_exits_zero(serve: Serve, host: SimHost) -> None:
    run = serve(QWEN14, ["--gpu-memory-utilization", "0.92"])
    run.wait_healthy()
    prompt = " ".join(["tok"] * 6000)
    resp = run.client.post(
        f"{run.base}/v1/completions", json={"model": QWEN14, "prompt": prompt, "max_tokens": 8}
    )
    assert resp.status_code == 500
    assert run.client.get(f"{run.base}/health").status_code == 503
    assert run.wait() == 0
    out = run.output()
    assert "EngineCore encountered a fatal error." in out
    assert "RuntimeError: NPU out of memory. Tried to allocate 2.93 GiB (NPU 0; 60.97 GiB" in out
    assert "If reserved memory is >> allocated memory try setting max_split_size_mb" in out
    dead = "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."
    assert out.index("NPU out of memory") < out.index(dead)


def test_expandable_segments_make_room(serve: Serve) -> None:
    run = serve(QWEN14, [], {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"})
    run.wait_healthy()
    prompt = " ".join(["tok"] * 6000)
    resp = run.client.post(f"{run.base}/v1/completions", json={"prompt": prompt})
    assert resp.status_code == 200


def test_device_fault_at_run_time(serve: Serve, host: SimHost) -> None:
    run = serve("Qwen/Qwen2.5-7B-Instruct", [], {"ASCEND_RT_VISIBLE_DEVICES": "3"})
    run.wait_healthy()
    host.inject(3, "heartbeat_lost")
    assert run.wait() == 0
    out = run.output()
    assert "error code is 507010" in out
    assert "EngineDeadError" in out
    plog = next((host.log_root / "debug" / "plog").glob(f"plog-{run.proc.pid}_*.log")).read_text()
    assert (
        f"[ascend][curpid: {run.proc.pid}, {run.proc.pid + 8}][drv][devmgr]"
        "[devdrv_heartbeat_lost 1203] device 3 heartbeat lost, device status abnormal." in plog
    )
    assert plog.splitlines()[-2].startswith(f"[ERROR] DRV({run.proc.pid},python3):")
    assert "error code is 507010" in plog


def test_unhealthy_device_fails_start(serve: Serve, host: SimHost) -> None:
    host.inject(3, "heartbeat_lost")
    run = serve("Qwen/Qwen2.5-7B-Instruct", [], {"ASCEND_RT_VISIBLE_DEVICES": "3"})
    assert run.wait() == 1
    out = run.output()
    assert "aclrtSetDevice(device_id_), error code is 507033" in out
    assert "ERR00100 PTA call acl api failed" in out
    assert "Failed core proc(s): {}" in out
