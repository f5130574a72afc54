"""HTTP side of the fake server: the OpenAI-compatible subset and /metrics.

Served by ``http.server.ThreadingHTTPServer`` so a slow completion does not
block /health probes, like uvicorn's event loop does not.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ascend_doctor.sim.engine_core import TTFT_BUCKETS, Engine, ttft_seconds
from ascend_doctor.sim.msprof import write_ascend_pt
from ascend_doctor.sim.otlp import RequestTiming, SpanSender
from ascend_doctor.sim.vlog import API, ENGINE

VERSION = "0.11.0"


def render_metrics(engine: Engine) -> str:
    """Prometheus text exposition with vLLM v1 metric names."""
    cfg = engine.cfg
    lbl = f'engine="0",model_name="{cfg.served_name}"'
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, value: float, suffix: str = "") -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.append(f"{name}{suffix}{{{lbl}}} {float(value)}")

    metric(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        engine.running,
    )
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", 0)
    metric(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        engine.kv_usage(),
    )
    metric(
        "vllm:num_preemptions",
        "counter",
        "Cumulative number of preemption from the engine.",
        0,
        "_total",
    )
    metric(
        "vllm:prompt_tokens",
        "counter",
        "Number of prefill tokens processed.",
        engine.prompt_tokens_total,
        "_total",
    )
    metric(
        "vllm:generation_tokens",
        "counter",
        "Number of generation tokens processed.",
        engine.generation_tokens_total,
        "_total",
    )
    out.append("# HELP vllm:request_success_total Count of successfully processed requests.")
    out.append("# TYPE vllm:request_success_total counter")
    out.append(
        f'vllm:request_success_total{{engine="0",finished_reason="length",'
        f'model_name="{cfg.served_name}"}} {float(engine.success_total)}'
    )
    name = "vllm:time_to_first_token_seconds"
    out.append(f"# HELP {name} Histogram of time to first token in seconds.")
    out.append(f"# TYPE {name} histogram")
    for bound, count in zip(TTFT_BUCKETS, engine.ttft_counts, strict=True):
        out.append(f'{name}_bucket{{{lbl},le="{bound}"}} {float(count)}')
    out.append(f'{name}_bucket{{{lbl},le="+Inf"}} {float(engine.ttft_count)}')
    out.append(f"{name}_count{{{lbl}}} {float(engine.ttft_count)}")
    out.append(f"{name}_sum{{{lbl}}} {engine.ttft_sum}")
    info = (
        f'block_size="{cfg.block_size}",cache_dtype="auto",'
        f'gpu_memory_utilization="{cfg.gpu_memory_utilization}",'
        f'num_cpu_blocks="None",num_gpu_blocks="{engine.plan.num_gpu_blocks}"'
    )
    out.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig")
    out.append("# TYPE vllm:cache_config_info gauge")
    out.append(f'vllm:cache_config_info{{{info},engine="0"}} 1.0')
    return "\n".join(out) + "\n"


class SimServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that carries the engine for its handlers."""

    daemon_threads = True
    engine: Engine
    """Set by the server once start-up succeeded, before serving begins."""

    def __init__(self, addr: tuple[str, int], profiler_dir: Path | None = None) -> None:
        super().__init__(addr, Handler)
        self.profiler_dir = profiler_dir
        """Torch trace directory; None means no /start_profile route (404), as in vLLM."""
        self.profile_started: float | None = None
        """Wall time of the running capture's start, None when not profiling."""
        self.profile_lock = threading.Lock()
        self.spans: SpanSender | None = None
        """Where request spans go (``--otlp-traces-endpoint``); None sends none."""


class Handler(BaseHTTPRequestHandler):
    """Routes of the fake OpenAI-compatible server."""

    server: SimServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Silence http.server's stderr log; access lines are printed uvicorn-style."""

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        reason = self.responses.get(status, ("",))[0]
        host, port = self.client_address[:2]
        self.server.engine.out.raw(
            API,
            f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {status} {reason}',
        )

    def _json(self, status: int, obj: object) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, status: int, kind: str, message: str) -> None:
        self._json(
            status, {"error": {"message": message, "type": kind, "param": None, "code": status}}
        )

    def do_GET(self) -> None:
        """/health, /metrics, /v1/models, /version."""
        engine = self.server.engine
        cfg = engine.cfg
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(503 if engine.dead.is_set() else 200, b"")
        elif path == "/metrics":
            self._send(200, render_metrics(engine).encode(), "text/plain; version=0.0.4")
        elif path == "/v1/models":
            card = {
                "id": cfg.served_name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "vllm",
                "root": cfg.model,
                "parent": None,
                "max_model_len": cfg.max_model_len,
            }
            self._json(200, {"object": "list", "data": [card]})
        elif path == "/version":
            self._json(200, {"version": VERSION})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        """/v1/completions, and /start_profile, /stop_profile with a profiler dir; else 404."""
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        if path in ("/start_profile", "/stop_profile") and self.server.profiler_dir is not None:
            self._profile(path == "/start_profile", self.server.profiler_dir)
            return
        if path != "/v1/completions":
            self._json(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as exc:
            self._error(400, "BadRequestError", f"Invalid JSON body: {exc}")
            return
        self._complete(body)

    def _profile(self, start: bool, root: Path) -> None:
        # vLLM answers 200 with an empty body once the engine has started or stopped.
        srv, out = self.server, self.server.engine.out
        with srv.profile_lock:
            if start:
                out.log(API, "INFO", "api_server.py:1028", "Starting profiler...")
                if srv.profile_started is None:
                    srv.profile_started = time.time()
                out.log(API, "INFO", "api_server.py:1030", "Profiler started.")
            else:
                out.log(API, "INFO", "api_server.py:1036", "Stopping profiler...")
                began, srv.profile_started = srv.profile_started, None
                if began is not None:
                    top = write_ascend_pt(root, out.pid, began, time.time(), self._device())
                    out.log(
                        ENGINE,
                        "INFO",
                        "torch_npu_profiler.py:88",
                        f"Profiling data is saved in {top}",
                    )
                out.log(API, "INFO", "api_server.py:1038", "Profiler stopped.")
        self._send(200, b"")

    def _device(self) -> int:
        devices = self.server.engine.cfg.devices
        return devices[0] if devices else 0

    def _complete(self, body: dict[str, Any]) -> None:
        arrival = time.time()
        engine = self.server.engine
        cfg = engine.cfg
        model = body.get("model", cfg.served_name)
        if model not in (cfg.served_name, cfg.model):
            self._error(404, "NotFoundError", f"The model `{model}` does not exist.")
            return
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        prompt_tokens = len(str(prompt).split())
        max_tokens = int(body.get("max_tokens") or 16)
        if prompt_tokens + max_tokens > cfg.max_model_len:
            self._error(
                400,
                "BadRequestError",
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, "
                f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
                f"messages, {max_tokens} in the completion). Please reduce the length of the "
                "messages or completion.",
            )
            return
        if not engine.complete(prompt_tokens, max_tokens):
            self._error(
                500,
                "InternalServerError",
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
            )
            return
        request_id = f"cmpl-{uuid.uuid4().hex}"
        if self.server.spans is not None:
            self.server.spans.add(
                RequestTiming(
                    request_id=request_id,
                    model=cfg.served_name,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=max_tokens,
                    max_tokens=max_tokens,
                    temperature=float(body.get("temperature", 1.0)),
                    top_p=float(body.get("top_p", 1.0)),
                    n=int(body.get("n", 1)),
                    arrival=arrival,
                    scheduled=arrival,
                    first_token=arrival + ttft_seconds(prompt_tokens),
                    finished=time.time(),
                    traceparent=self.headers.get("traceparent", ""),
                )
            )
        self._json(
            200,
            {
                "id": request_id,
                "object": "text_completion",
                "created": int(time.time()),
                "model": cfg.served_name,
                "choices": [
                    {
                        "index": 0,
                        "text": " ok" * max_tokens,
                        "logprobs": None,
                        "finish_reason": "length",
                        "stop_reason": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": max_tokens,
                    "total_tokens": prompt_tokens + max_tokens,
                },
            },
        )
