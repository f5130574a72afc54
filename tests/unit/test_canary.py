"""The canary: its verdicts on captured completion bodies, and the collector against a real
HTTP server on loopback that answers right, garbled, or never."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ascend_doctor.collectors.canary import HEADER, USER, CanaryCollector, References
from ascend_doctor.collectors.canary_judge import completion_text, garbled, judge
from ascend_doctor.core.events import Sample
from ascend_doctor.rules import Engine, load_rules
from tests.conftest import FIXTURES


def body(name: str) -> str:
    return (FIXTURES / "canary" / name).read_text(encoding="utf-8")


def test_a_good_answer_is_ok_and_quoted() -> None:
    v = judge(200, body("ok.json"), None)
    assert v.ok and not v.corrupt
    assert v.text == repr(" Paris. It is the capital of France")


def test_exclamation_marks_are_one_token_repeated() -> None:
    v = judge(200, body("exclamation.json"), " Paris. It is the capital of France")
    assert v.kind == "repetition" and v.corrupt
    assert v.detail == "'!' repeated 8 times" and v.text == "'!!!!!!!!'"


def test_an_empty_completion_is_empty() -> None:
    assert judge(200, body("empty.json"), None).kind == "empty"


def test_replacement_characters() -> None:
    v = judge(200, body("replacement.json"), None)
    assert v.kind == "replacement" and v.detail == "7 of 7 characters are U+FFFD"


def test_an_engine_error_is_an_http_error_not_corrupt_output() -> None:
    v = judge(500, body("error-500.json"), None)
    assert v.kind == "http_error" and not v.corrupt and "EngineCore encountered" in v.detail


def test_a_body_that_is_no_completion_is_malformed() -> None:
    assert judge(200, "<html>502 Bad Gateway</html>", None).kind == "malformed"
    assert judge(200, json.dumps({"choices": []}), None).kind == "malformed"
    assert completion_text(json.dumps({"choices": [{"message": {"content": "hi"}}]})) == "hi"


def test_drift_from_the_reference() -> None:
    v = judge(200, body("ok.json"), " Paris. It is the largest city")
    assert v.kind == "drift" and v.corrupt and "differs from this launch's first" in v.detail


@pytest.mark.parametrize(
    "text",
    [" Paris. It is", " 1 2 3 4", " the the cat", "!!!", " Paris!!!!!"],
)
def test_answers_that_are_not_garbled(text: str) -> None:
    assert garbled(text) is None


def test_words_repeated_are_garbled() -> None:
    assert garbled(" the the the the") == ("repetition", "one token repeated 4 times")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    mode = "ok"
    seen: list[tuple[dict[str, str], dict[str, Any]]]
    release: threading.Event


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, data: str, ctype: str = "application/json") -> None:
        raw = data.encode()
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path == "/metrics":
            self._send(200, (FIXTURES / "vllm" / "metrics-v1.txt").read_text(), "text/plain")
        else:
            self._send(200, json.dumps({"data": [{"id": "Qwen/Qwen2.5-7B-Instruct"}]}))

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.seen.append((dict(self.headers), req))
        if self.server.mode == "stuck":
            self.server.release.wait(30)
            return
        self._send(200, body("exclamation.json" if self.server.mode == "garbled" else "ok.json"))


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.seen, srv.release = [], threading.Event()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()


def canary(server: _Server, tmp_path: Path, **kw: Any) -> CanaryCollector:
    host, port = server.server_address[:2]
    return CanaryCollector(
        f"http://{host!s}:{port}",
        prompt="The capital of France is",
        max_tokens=8,
        seed=0,
        timeout=kw.pop("timeout", 5.0),
        references=References(tmp_path / "ref.json"),
        launch_key=lambda: "vllm serve Qwen/Qwen2.5-7B-Instruct",
        **kw,
    )


async def test_the_request_is_greedy_seeded_and_marked(server: _Server, tmp_path: Path) -> None:
    (sample,) = await canary(server, tmp_path).collect()
    assert sample.values["canary_kind"] == "ok" and sample.values["canary_ok"] == 1
    assert sample.values["running"] == 21  # from /metrics, scraped first
    headers, req = server.seen[0]
    assert headers[HEADER] == "1" and req["user"] == USER
    assert req["temperature"] == 0 and req["seed"] == 0 and req["max_tokens"] == 8
    assert sample.values["canary_reference"] == "recorded"


async def test_the_first_good_answer_is_the_launchs_reference(
    server: _Server, tmp_path: Path
) -> None:
    await canary(server, tmp_path).collect()
    again = canary(server, tmp_path)  # a doctor restarted mid-launch
    (sample,) = await again.collect()
    assert sample.values["canary_reference"] == "kept" and sample.values["canary_ok"] == 1
    saved = json.loads((tmp_path / "ref.json").read_text())
    assert list(saved.values()) == [" Paris. It is the capital of France"]


async def test_garbled_output_fires_the_output_corrupt_rule(
    server: _Server, tmp_path: Path
) -> None:
    server.mode = "garbled"
    (sample,) = await canary(server, tmp_path).collect()
    assert sample.values["canary_corrupt"] == 1
    (finding,) = Engine(load_rules()).evaluate([sample])
    assert finding.rule == "canary-output-garbled" and finding.category == "output_corrupt"
    assert "'!!!!!!!!'" in finding.summary


async def test_two_unanswered_canaries_fire_server_unresponsive(
    server: _Server, tmp_path: Path
) -> None:
    server.mode = "stuck"
    c = canary(server, tmp_path, timeout=0.5)
    engine = Engine(load_rules())
    first = await c.collect()
    assert first[0].values["canary_kind"] == "timeout" and not engine.evaluate(first)
    # the metrics say 21 running: a busy server, not a stuck idle one
    second = await c.collect()
    assert second[0].values["canary_timeouts"] == 2 and not engine.evaluate(second)
    idle = Sample("canary", "server", second[0].at, {**second[0].values, "running": 0.0})
    (finding,) = engine.evaluate([idle])
    assert finding.rule == "canary-unanswered-idle" and finding.category == "server_unresponsive"


async def test_no_canary_while_a_step_runs(server: _Server, tmp_path: Path) -> None:
    assert await canary(server, tmp_path, busy=lambda: True).collect() == []
    assert server.seen == []


def _runners(tmp_path: Path, **ctx: Any) -> list[str]:
    from ascend_doctor.agent.collection import build_runners
    from ascend_doctor.collectors import CollectorContext
    from ascend_doctor.core.config import CanaryConfig, CollectorsConfig
    from ascend_doctor.core.store import Store

    canary_cfg = CanaryConfig(**ctx.pop("canary", {}))
    cfg = CollectorsConfig(canary=canary_cfg)
    watched = ctx.pop("watched", True)
    store = Store.in_dir(tmp_path)
    try:
        runners = build_runners(
            CollectorContext(cfg, "http://127.0.0.1:1", lambda: None, "npu-smi", **ctx),
            store,
            watched=watched,
            running=lambda: True,
            on_samples=lambda s: None,
            on_evidence=lambda n, t: None,
            on_run=lambda n, s, ok: None,
        )
    finally:
        store.close()
    return [r.spec.name for r in runners]


def test_the_canary_runs_for_a_supervised_server_and_only_while_it_runs(tmp_path: Path) -> None:
    from ascend_doctor.collectors.canary import SPEC

    assert "canary" in _runners(tmp_path)
    assert SPEC.while_running and SPEC.needs_server  # never while starting; never observing


def test_canary_off_attach_mode_and_observer_only(tmp_path: Path) -> None:
    assert "canary" not in _runners(tmp_path / "off", canary={"enabled": False})
    assert "canary" not in _runners(tmp_path / "attach", attached=True)
    assert "canary" in _runners(tmp_path / "asked", attached=True, canary={"attach": True})
    # observer-only: no server is watched, so nothing to ask
    assert "canary" not in _runners(tmp_path / "observe", watched=False)
