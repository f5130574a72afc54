"""Issue 15, point 1, against the simulated host through the real CLI: anyone who can send a
request can make the server print any text. A prompt that quotes a KV-cache error or a lost
device heartbeat must not lower --max-model-len, restart, stop or reset anything; text in
another followed log waits for an independent signal and acts only when npu-smi agrees."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from ascend_doctor.core.events import ProcessState
from tests.conftest import poll
from tests.integration.test_remediation_live import CONFIG, doctor_for, serve

pytestmark = pytest.mark.integration

KV_TEXT = (
    "ValueError: To serve at least one request with the models's max seq len (8192), (6.00 GiB"
    " KV cache is needed, which is larger than the available KV cache memory (2.89 GiB). Based"
    " on the available memory, the estimated maximum model length is 2048."
)
HEARTBEAT_TEXT = (
    "[ERROR] RUNTIME(4242,python3):2026-12-02-12:00:01.201.339 [direct_hwts_engine.cc:407]4250"
    " SyncTask:Device[0] lost heartbeat."
)


def _consumed(doc: object, path: Path) -> bool:
    """The doctor has read ``path`` to its end (its checkpoint says so)."""
    st = path.stat()
    row = doc.read(lambda s: s.offset(f"{st.st_dev}:{st.st_ino}"))  # type: ignore[attr-defined]
    return row is not None and row[0] >= st.st_size


def test_a_prompt_quoting_failures_is_never_evidence(tmp_path: Path) -> None:
    with doctor_for(tmp_path) as (doc, host):
        argv, env = serve(host, 0, "--max-model-len", "8192", "--enable-log-requests")
        doc.start("--", *argv, env=env)
        running = poll(
            lambda: (m := doc.read(lambda s: s.server())) and m.state == ProcessState.RUNNING and m,
            60,
            "the server to be healthy",
        )
        url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}/v1/completions"
        for prompt in (KV_TEXT, HEARTBEAT_TEXT, "line one\n" + HEARTBEAT_TEXT):
            r = httpx.post(url, json={"model": "Qwen/Qwen2.5-7B-Instruct", "prompt": prompt,
                                      "max_tokens": 2}, timeout=30)  # fmt: skip
            assert r.status_code == 200, r.text
        log = doc.state / "server.log"
        # the request logger's line reaches the log through the supervisor's pipe, maybe after
        # the response: wait for it rather than read at once
        poll(lambda: "lost heartbeat" in log.read_text(), 30, "the server to echo the prompts")
        poll(lambda: _consumed(doc, log), 30, "the doctor to read the echoes")
        assert doc.read(lambda s: s.incidents()) == [], "a prompt made a finding"
        assert doc.read(lambda s: s.overrides()) == []
        assert doc.starts() == 1
        server = doc.read(lambda s: s.server())
        assert server.state == ProcessState.RUNNING and server.pid == running.pid
        assert not [c for c in host.npu_smi_calls() if "set" in c["argv"]]
        assert doc.stop() == 0


def test_text_alone_waits_and_a_reset_follows_only_npu_smi(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    config = CONFIG + f'\n[logs]\npaths = ["{app}/*.log"]\n'
    with doctor_for(tmp_path, config) as (doc, host):
        argv, env = serve(host, 0, "--max-model-len", "8192")
        doc.start("--", *argv, env=env)
        running = poll(
            lambda: (m := doc.read(lambda s: s.server())) and m.state == ProcessState.RUNNING and m,
            60,
            "the server to be healthy",
        )
        # a local user (or any component that echoes requests) writes the words
        (app / "echo.log").write_text(HEARTBEAT_TEXT + "\n")
        inc = poll(lambda: doc.incident("device_fault"), 60, "the text finding")
        held = poll(
            lambda: next((a for a in doc.actions(inc.id) if a.name == "corroborate"), None),
            60,
            "the decision to wait for a signal",
        )
        assert held.outcome.value == "refused" and "log text alone" in held.reason
        assert not [a for a in doc.actions(inc.id) if a.name == "reset_device"]
        assert doc.read(lambda s: s.server()).pid == running.pid
        assert not [c for c in host.npu_smi_calls() if "set" in c["argv"]]
        # the card really fails: npu-smi says so, and the plan goes on
        host.inject(0, "heartbeat_lost")
        poll(
            lambda: any(a.name == "reset_device" for a in doc.actions(inc.id)),
            90,
            "the corroborated reset",
        )
        assert doc.stop() == 0
        assert os.path.exists(doc.state)
