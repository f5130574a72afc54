"""The fake vllm serve per release: strict flags, start-up lines, refusals, endpoints."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable

import pytest
from simhost_support import ServerRun

from ascend_doctor.sim.host import SimHost

QWEN14 = "Qwen/Qwen2.5-14B-Instruct"
QWEN7 = "Qwen/Qwen2.5-7B-Instruct"
Serve = Callable[..., ServerRun]
KV_ERRORS = {
    "0.11": (
        "ValueError: To serve at least one request with the models's max seq len (32768), "
        "(6.00 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(2.89 GiB). Based on the available memory, the estimated maximum model length is "
        "15783. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine."
    ),
    "0.23": (
        "ValueError: To serve at least one request with the model's max seq len (32768), "
        "(6.0 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(2.89 GiB). Based on the available memory, the estimated maximum model length is "
        "15783. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the "
        "CPU backend) or decreasing `max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    ),
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain(text: str) -> str:
    """Output without 0.11's coloured prefixes and the formatter's carriage returns."""
    return ANSI.sub("", text).replace("\r", "")


@pytest.mark.parametrize(
    ("version", "engine"), [("0.11", "EngineCore_DP0"), ("0.23", "EngineCore")]
)
def test_too_large_max_model_len_is_refused(
    serve: Serve, host: SimHost, version: str, engine: str
) -> None:
    run = serve(
        QWEN14, ["--max-model-len", "32768", "--gpu-memory-utilization", "0.5"], version=version
    )
    assert run.wait() == 1
    out = plain(run.output())
    (line,) = [ln for ln in out.splitlines() if KV_ERRORS[version] in ln]
    assert line.startswith(f"({engine} pid=") and " ERROR " in line
    assert f"Failed core proc(s): {{'{engine}': 1}}" in out
    assert host.device(0)["health"] == "OK"
    assert host.state_path.read_text().count('"pid"') == 0  # the card was let go


@pytest.mark.parametrize(
    ("version", "rejected"),
    [
        ("0.11", "--profiler-config {}"),
        ("0.18", "--swap-space 4"),
        ("0.23", "--disable-log-requests"),
        ("0.13", "--some-unknown-flag"),
    ],
)
def test_unknown_flags_exit_2_like_vllm(serve: Serve, version: str, rejected: str) -> None:
    run = serve(QWEN7, rejected.split(), version=version)
    assert run.wait() == 2
    lines = run.output().splitlines()
    assert lines[0].startswith("usage: vllm [-h] [-v]")
    assert lines[-1] == f"vllm: error: unrecognized arguments: {rejected}"


def test_32k_is_decimal_and_32K_binary(serve: Serve) -> None:
    small = serve(QWEN7, ["--max-model-len", "32k"])
    small.wait_healthy()
    assert "Using max model len 32000" in small.output()
    big = serve(QWEN7, ["--max-model-len", "32K"], {"ASCEND_RT_VISIBLE_DEVICES": "1"})
    big.wait_healthy()
    assert "Using max model len 32768" in big.output()
    bad = serve(QWEN7, ["--max-model-len", "1.5K"])
    assert bad.wait() == 2
    assert "Decimals are not allowed with binary suffixes like K" in bad.output()


@pytest.mark.parametrize("version", ["0.11", "0.23"])
def test_serves_and_stops_gracefully(serve: Serve, host: SimHost, version: str) -> None:
    run = serve(
        QWEN14, ["--max-model-len", "16384", "--gpu-memory-utilization", "0.92"], version=version
    )
    run.wait_healthy()
    c = run.client
    assert c.get(f"{run.base}/v1/models").json()["data"][0]["max_model_len"] == 16384
    assert c.get(f"{run.base}/version").json() == {"version": f"{version}.0"}
    done = c.post(
        f"{run.base}/v1/completions",
        json={"model": QWEN14, "prompt": "one two three", "max_tokens": 4},
    )
    assert done.status_code == 200
    assert done.json()["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    # the stats line of the interval that saw the request (polled: a loaded machine is slow)
    deadline = time.monotonic() + 10
    while "Avg prompt throughput" not in run.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    run.proc.send_signal(signal.SIGTERM)
    # a deadline, not a measure: four test workers on two cores slow the three processes'
    # shutdown (one 10 s wait was missed so)
    assert run.wait(timeout=30) == 0
    out = plain(run.output())
    api = f"(APIServer pid={run.proc.pid}) "
    common = [
        "Loading model weights took 27.5100 GB",
        "GPU KV cache size: 162,560 tokens",
        "Maximum concurrency for 16,384 tokens per request: 9.92x",
        "Application startup complete.",
        "Shutting down FastAPI HTTP server.",
    ]
    if version == "0.11":
        common += [
            "vLLM API server version 0.11.0",
            ", total memory: 68719476736",
            f"Starting vLLM API server 0 on http://127.0.0.1:{run.port}",
        ]
    else:
        common += [
            " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.23.0",
            "Available KV cache memory: 29.77 GiB",
            f"Starting vLLM server on http://127.0.0.1:{run.port}",
        ]
    for text in common:
        assert text in out, text
    (stats,) = [ln for ln in out.splitlines() if "Engine 000: Avg prompt throughput" in ln][:1]
    assert stats.startswith(api)  # the API server logs the stats, not the engine core
    assert str(run.proc.pid) not in host.state_path.read_text()


def test_stats_line_only_after_work(serve: Serve) -> None:
    run = serve(QWEN7)
    run.wait_healthy()
    time.sleep(1.0)  # three stats intervals of an idle server
    assert "Engine 000:" not in run.output()


def test_0_11_colours_the_prefix_even_into_a_file(serve: Serve) -> None:
    run = serve(QWEN7, version="0.11")
    run.wait_healthy()
    first = run.output().splitlines()[0]
    assert first.startswith(f"\x1b[1;36m(APIServer pid={run.proc.pid})\x1b[0;0m INFO ")
    newer = serve(QWEN7, env={"ASCEND_RT_VISIBLE_DEVICES": "1"}, version="0.13")
    newer.wait_healthy()
    assert newer.output().startswith(f"(APIServer pid={newer.proc.pid}) INFO ")


@pytest.mark.parametrize("version", ["0.11", "0.23"])
def test_log_requests_per_release(serve: Serve, version: str) -> None:
    run = serve(QWEN7, ["--enable-log-requests"], version=version)
    run.wait_healthy()
    run.client.post(f"{run.base}/v1/completions", json={"prompt": "it's me", "max_tokens": 2})
    (line,) = [ln for ln in plain(run.output()).splitlines() if "Received request cmpl-" in ln]
    assert "params: SamplingParams(n=1, " in line and "max_tokens=2," in line
    if version == "0.11":
        assert ': prompt: "it\'s me", params:' in line  # repr-quoted, as vLLM logs it
    else:
        assert "prompt" not in line.split("params:")[0]


def test_metrics_exposition_is_prometheus_clients(serve: Serve) -> None:
    run = serve(QWEN7)
    run.wait_healthy()
    run.client.post(f"{run.base}/v1/completions", json={"prompt": "a b c", "max_tokens": 4})
    text = run.client.get(f"{run.base}/metrics").text
    lbl = f'engine="0",model_name="{QWEN7}"'
    assert f"vllm:prompt_tokens_total{{{lbl}}} 3.0" in text
    assert re.search(rf"vllm:prompt_tokens_created{{{re.escape(lbl)}}} \d+\.\d+", text)
    # prometheus_client writes labels sorted by name
    ttft = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="2560.0",model_name='
    assert f'{ttft}"{QWEN7}"}} 1.0' in text
    e2e = 'vllm:e2e_request_latency_seconds_bucket{engine="0",le="7680.0",model_name='
    assert f'{e2e}"{QWEN7}"}} 1.0' in text
    assert re.search(r'vllm:cache_config_info\{block_size="128",cache_dtype="auto",', text)
    assert 'gpu_memory_utilization="0.9"' in text
    assert "process_resident_memory_bytes" in text


def test_unhealthy_device_fails_start(serve: Serve, host: SimHost) -> None:
    host.inject(3, "heartbeat_lost")
    run = serve(QWEN7, [], {"ASCEND_RT_VISIBLE_DEVICES": "3"})
    assert run.wait() == 1
    out = plain(run.output())
    assert "aclrtSetDevice(device_id_), error code is 507033" in out
    assert "ERR00100 PTA call acl api failed" in out
    assert "[Error]: Failed to start the device. " in out
    assert "Failed core proc(s): {'EngineCore_DP0': 1}" in out
