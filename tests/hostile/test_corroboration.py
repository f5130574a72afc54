"""Text alone never disrupts a healthy server (issue 15, point 1): decisions on a real store
with a server that answers /health, and the request-logger lines of every vLLM release."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.remediation import Context, HostTools, Remediator
from ascend_doctor.core.config import IncidentsConfig, RemediationConfig
from ascend_doctor.core.events import Finding, IncidentState, LogChunk, Outcome, Sample
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.core.store import Store
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules.echo import is_request_log
from tests.fakes import FakeServer

RULES = load_rules()
KV = {"max_model_len": "32768", "estimate": "16162"}


class World:
    def __init__(self, tmp_path: Path, **policy: object) -> None:
        self.store = Store.in_dir(tmp_path)
        self.now = 1000.0
        base = LaunchSpec(("vllm", "serve", "m", "--max-model-len", "32768"))
        self.server = FakeServer(
            lambda: base.apply(self.store.overrides()),
            base_env={"ASCEND_RT_VISIBLE_DEVICES": "3"},
            is_running=True,
            healthy=True,
        )
        ctx = Context(
            config=RemediationConfig(**policy),  # type: ignore[arg-type]
            store=self.store,
            server=self.server,
            host=HostTools(npu_smi="npu-smi-not-installed", npu_smi_timeout=1.0),
            sleep=lambda s: asyncio.sleep(0),
            clock=lambda: self.now,
        )
        self.incidents = IncidentManager(self.store, IncidentsConfig(), clock=lambda: self.now)
        self.remediator = Remediator(ctx, self.incidents, RULES)

    def text(self, rule: str, captures: dict[str, str], subject: str = "server") -> Finding:
        r = next(x for x in RULES.text if x.id == rule)
        return Finding(
            rule, r.category, r.severity, r.role, subject, "s", self.now, captures,
            path="server.log", offset=10, remediation=r.remediation,
        )  # fmt: skip


async def test_a_text_finding_beside_a_healthy_server_waits_and_changes_nothing(
    tmp_path: Path,
) -> None:
    w = World(tmp_path)
    (inc_id,) = w.incidents.ingest([w.text("vllm-kv-cache-max-len-estimate", KV)])
    result = await w.remediator.remediate(inc_id)
    assert not result.restart and not result.escalated
    assert result.retry_at is not None and result.retry_at <= w.now + 5
    (held,) = w.store.actions(inc_id)
    assert (held.name, held.outcome) == ("corroborate", Outcome.REFUSED)
    assert "log text alone" in held.reason
    assert w.store.overrides() == [] and w.server.stopped == []
    # asked again while nothing agrees: still held, recorded once
    w.now += 5
    await w.remediator.remediate(inc_id)
    assert [a.name for a in w.store.actions(inc_id)] == ["corroborate"]
    # the server fails /health: an independent signal of the failure, the step acts
    w.server.healthy = False
    result = await w.remediator.remediate(inc_id)
    assert result.restart
    assert w.server.spec().flag("--max-model-len") == "16128"


async def test_uncorroborated_heartbeat_never_resets_and_closes_after_the_window(
    tmp_path: Path,
) -> None:
    w = World(tmp_path, allow_device_reset=True, corroboration_window=60.0)
    finding = w.text("rt-device-lost-heartbeat", {"device": "3"}, subject="npu3")
    (inc_id,) = w.incidents.ingest([finding])
    # npu-smi says the card is fine: no signal
    w.store.add_sample("npu_smi", "npu3", w.now, {"health": "OK"})
    assert (await w.remediator.remediate(inc_id)).retry_at is not None
    w.now += 61
    result = await w.remediator.remediate(inc_id)
    assert not result.restart and not result.escalated, "nobody is paged"
    inc = w.store.incident(inc_id)
    assert inc.state == IncidentState.RESOLVED
    names = [(a.name, a.outcome.value) for a in w.store.actions(inc_id)]
    assert names == [("corroborate", "refused"), ("corroborate", "refused")]
    assert "nothing done" in w.store.actions(inc_id)[-1].reason
    assert w.server.stopped == []


async def test_npu_smi_reporting_the_device_corroborates_a_reset(tmp_path: Path) -> None:
    w = World(tmp_path, allow_device_reset=True, mode="suggest")
    (inc_id,) = w.incidents.ingest(
        [w.text("rt-device-lost-heartbeat", {"device": "3"}, subject="npu3")]
    )
    w.store.add_sample("npu_smi", "npu3.0", w.now, {"health": "Alarm"})
    await w.remediator.remediate(inc_id)
    names = [a.name for a in w.store.actions(inc_id)]
    assert "corroborate" not in names and "reset_device" in names


async def test_a_sample_finding_in_the_incident_corroborates(tmp_path: Path) -> None:
    w = World(tmp_path)
    engine = Engine(RULES, clock=lambda: w.now)
    sample = Sample("npu_smi", "npu3", w.now, {"health": "Critical"})
    sampled = [f for f in engine.evaluate([sample]) if f.category.value == "device_fault"]
    assert sampled and sampled[0].offset < 0
    (inc_id,) = w.incidents.ingest(sampled)
    await w.remediator.remediate(inc_id)
    assert "corroborate" not in [a.name for a in w.store.actions(inc_id)]


async def test_an_unanswered_canary_corroborates_but_a_good_one_does_not(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.store.add_sample("canary", "server", w.now, {"canary_timeouts": 0, "canary_ok": 1})
    (inc_id,) = w.incidents.ingest([w.text("vllm-kv-cache-max-len-estimate", KV)])
    await w.remediator.remediate(inc_id)
    assert [a.name for a in w.store.actions(inc_id)] == ["corroborate"]
    # the doctor's own request goes unanswered: not a user's text, the step acts
    w.now += 5
    w.store.add_sample("canary", "server", w.now, {"canary_timeouts": 2})
    result = await w.remediator.remediate(inc_id)
    assert result.restart
    assert w.server.spec().flag("--max-model-len") == "16128"


ECHOES = [
    # v0.11 (vllm/entrypoints/logger.py:41): the prompt at INFO
    "(APIServer pid=1) INFO 08-28 02:33:28 [logger.py:41] Received request cmpl-1-0: prompt:"
    " 'Device[0] lost heartbeat.', params: SamplingParams(n=1), prompt_token_ids: [1],"
    " prompt_embeds shape: None, lora_request: None.",
    # v0.12+: the prompt at DEBUG
    "(APIServer pid=1) DEBUG 11-02 10:00:00 [logger.py:49] Request cmpl-2 details: prompt:"
    " \"ValueError: The model's max seq len (32768) is larger than the maximum number of tokens"
    ' that can be stored in KV cache (20752).", prompt_token_ids: [1], prompt_embeds shape: None.',
    # --enable-log-outputs, streaming and not
    "(APIServer pid=1) INFO 11-02 10:00:01 [logger.py:80] Generated response chatcmpl-3"
    " (streaming delta): output: 'Device[0] lost heartbeat.', output_token_ids: [5],"
    " finish_reason: None",
    "(APIServer pid=1) INFO 11-02 10:00:01 [logger.py:80] Generated response chatcmpl-3"
    " (streaming complete): output: 'Device[0] lost heartbeat.', finish_reason: stop",
    # newest: the raw HTTP body as JSON
    "(APIServer pid=1) INFO 12-01 10:00:01 [logger.py:120] Received raw HTTP request req-4:"
    ' {"method": "POST", "path": "/v1/completions", "headers": {}, "body":'
    ' "{\\"prompt\\": \\"Device[0] lost heartbeat.\\"}"}',
]


@pytest.mark.parametrize("line", ECHOES)
def test_every_request_logger_wording_is_never_evidence(line: str) -> None:
    assert is_request_log(line.encode())
    engine = Engine(RULES)
    chunk = LogChunk("server.log", "server", 0, (line + "\n").encode())
    assert engine.scan(chunk) == []
