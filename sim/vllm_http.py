"""HTTP side of the fake API server: the OpenAI-compatible subset, /metrics and the profiler.

Served by ``http.server.ThreadingHTTPServer`` so a slow completion does not block /health
probes, like uvicorn's event loop does not. Everything that needs the engine goes through the
engine core process: a completion, and ``/start_profile`` / ``/stop_profile``, which vLLM
routes as utility calls (``AsyncLLM.start_profile``): they wait for the engine's busy loop, so
they hang while a step is stuck, and ``/stop_profile`` returns only after the workers parsed
their traces.
"""

from __future__ import annotations

import json
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ascend_doctor.sim.engine_client import EngineClient
from ascend_doctor.sim.engine_core import ServeConfig
from ascend_doctor.sim.otlp import RequestTiming, SpanSender
from ascend_doctor.sim.state import read_state, state_path_from_env
from ascend_doctor.sim.versions import VersionProfile
from ascend_doctor.sim.vlog import VllmOut


class SimServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that carries the engine client for its handlers."""

    daemon_threads = True
    engine: EngineClient
    """Set by the API server before serving begins."""

    def __init__(
        self,
        addr: tuple[str, int],
        cfg: ServeConfig,
        version: VersionProfile,
        out: VllmOut,
        profiler_dir: Path | None = None,
    ) -> None:
        super().__init__(addr, Handler)
        self.cfg, self.version, self.out = cfg, version, out
        self.profiler_dir = profiler_dir
        """Torch trace directory; None means no /start_profile route (404), as in vLLM."""
        self.spans: SpanSender | None = None
        """Where request spans go (``--otlp-traces-endpoint``); None sends none."""


def _sampling_params(max_tokens: int, body: dict[str, Any]) -> str:
    # SamplingParams.__repr__ (vllm/sampling_params.py), defaults of an OpenAI completion.
    return (
        f"SamplingParams(n={int(body.get('n', 1))}, presence_penalty=0.0, "
        "frequency_penalty=0.0, repetition_penalty=1.0, "
        f"temperature={float(body.get('temperature', 1.0))}, "
        f"top_p={float(body.get('top_p', 1.0))}, "
        "top_k=0, min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], "
        f"include_stop_str_in_output=False, ignore_eos=False, max_tokens={max_tokens}, "
        "min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
        "spaces_between_special_tokens=True, truncate_prompt_tokens=None, "
        "structured_outputs=None, extra_args=None)"
    )


ANSWER = "Paris. It is the capital and the largest city of France, on the Seine".split()
"""What the fake model answers, one word a token: greedy decoding is deterministic, so the
same request gets the same text every time, as vLLM's does with temperature 0."""


def answer(max_tokens: int) -> str:
    """The completion of ``max_tokens`` tokens; garbled while the host's ``garbled`` quirk is
    on. A model whose numerics broke (a precision or kernel fault after an upgrade, bad
    weights, a bad card) emits token id 0 at every step, ``!`` in Qwen's vocabulary
    (vllm-project/vllm-ascend#445, #562, #6980), or stops at once with nothing."""
    try:
        garbled = read_state(state_path_from_env()).get("quirks", {}).get("garbled")
    except (OSError, ValueError):
        garbled = None
    if garbled == "exclamation":
        return "!" * max_tokens
    if garbled == "empty":
        return ""
    return "".join(" " + ANSWER[n % len(ANSWER)] for n in range(max_tokens))


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
        try:
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # the client gave up (a probe's timeout); uvicorn drops such a response silently
            return
        reason = self.responses.get(status, ("",))[0]
        host, port = self.client_address[:2]
        self.server.out.raw(
            f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {status} {reason}'
        )

    def _json(self, status: int, obj: object) -> None:
        self._send(status, json.dumps(obj).encode())

    def _error(self, status: int, kind: str, message: str) -> None:
        self._json(
            status, {"error": {"message": message, "type": kind, "param": None, "code": status}}
        )

    def do_GET(self) -> None:
        """/health, /metrics, /v1/models, /version."""
        engine, cfg = self.server.engine, self.server.cfg
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(503 if engine.dead.is_set() else 200, b"")
        elif path == "/metrics":
            self._send(200, engine.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
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
            self._json(200, {"version": self.server.version.vllm})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        """/v1/completions, and /start_profile, /stop_profile with a profiler dir; else 404."""
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        if path in ("/start_profile", "/stop_profile") and self.server.profiler_dir is not None:
            self._profile(path == "/start_profile")
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

    def _profile(self, start: bool) -> None:
        # vLLM answers 200 with an empty body once every worker has started or stopped.
        out = self.server.out
        word = "Starting" if start else "Stopping"
        out.log("INFO", "api_router.py:23" if start else "api_router.py:31", f"{word} profiler...")
        if not self.server.engine.profile(start):
            self._error(500, "InternalServerError", "EngineCore encountered an issue.")
            return
        out.log(
            "INFO",
            "api_router.py:25" if start else "api_router.py:33",
            "Profiler started." if start else "Profiler stopped.",
        )
        self._send(200, b"")

    def _log_request(
        self, request_id: str, prompt: str, max_tokens: int, body: dict[str, Any]
    ) -> None:
        params = _sampling_params(max_tokens, body)
        if self.server.version.request_log == "prompt":
            ids = list(range(100, 100 + len(prompt.split())))
            text = (
                f"Received request {request_id}: prompt: {prompt!r}, params: {params}, "
                f"prompt_token_ids: {ids}, prompt_embeds shape: None, lora_request: None."
            )
            self.server.out.log("INFO", "logger.py:41", text)
        else:
            text = f"Received request {request_id}: params: {params}, lora_request: None."
            self.server.out.log("INFO", "logger.py:64", text)

    def _complete(self, body: dict[str, Any]) -> None:
        arrival = time.time()
        engine, cfg = self.server.engine, self.server.cfg
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
        request_id = f"cmpl-{uuid.uuid4().hex}"
        if cfg.log_requests:
            self._log_request(f"{request_id}-0", str(prompt), max_tokens, body)
        done = engine.generate(prompt_tokens, max_tokens)
        if done is None:
            self._error(
                500,
                "InternalServerError",
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
            )
            return
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
                    first_token=arrival + float(done.get("ttft", 0.0)),
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
                        "text": answer(max_tokens),
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
