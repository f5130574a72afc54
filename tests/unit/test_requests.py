"""The daemon's side of CLI/TUI requests: each kind carried out on a real store and recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.launch import LaunchSpec
from ascend_doctor.agent.remediation import Context, HostTools, Remediator
from ascend_doctor.agent.requests import RequestRunner
from ascend_doctor.core.config import IncidentsConfig, RemediationConfig
from ascend_doctor.core.events import Finding, IncidentState
from ascend_doctor.core.records import Artifact
from ascend_doctor.core.store import Store
from ascend_doctor.rules import load_rules
from tests.fakes import FakeServer

RULES = load_rules()
KV = {"max_model_len": "32768", "estimate": "16162"}


class World:
    def __init__(self, tmp_path: Path, **policy: Any) -> None:
        self.store = Store.in_dir(tmp_path)
        self.now = 5000.0
        self.base = LaunchSpec(("vllm", "serve", "m", "--max-model-len", "32768"))
        self.config = RemediationConfig(**policy)
        ctx = Context(
            config=self.config,
            store=self.store,
            server=FakeServer(lambda: self.base.apply(self.store.overrides())),
            host=HostTools(npu_smi="npu-smi", npu_smi_timeout=1.0),
            sleep=lambda s: asyncio.sleep(0),
            clock=lambda: self.now,
        )
        self.incidents = IncidentManager(self.store, IncidentsConfig(), clock=lambda: self.now)
        self.remediator = Remediator(ctx, self.incidents, RULES)
        self.profiles: list[str] = []
        self.profile_error: Exception | None = None
        self.runner = RequestRunner(
            self.incidents,
            self.config,
            step=self.remediator.remediate,
            profile=self._profile,
            clock=lambda: self.now,
        )

    async def _profile(self) -> Artifact:
        if self.profile_error is not None:
            raise self.profile_error
        self.profiles.append("torch")
        return Artifact("torch_profile", "/state/profiles/torch/trace.json", 1, 0.0, 1.0)

    def incident(self) -> int:
        rule = next(r for r in RULES.text if r.id == "vllm-kv-cache-max-len-estimate")
        finding = Finding(
            rule=rule.id,
            category=rule.category,
            severity=rule.severity,
            role=rule.role,
            subject="server",
            summary="kv cache too small",
            at=self.now,
            captures=KV,
            path="server.log",
            offset=10,
            remediation=rule.remediation,
        )
        manager = IncidentManager(self.store, IncidentsConfig(), clock=lambda: self.now)
        (incident_id,) = manager.ingest([finding])
        return incident_id


async def test_ack_marks_the_incident_and_rearms_its_breaker(tmp_path: Path) -> None:
    w = World(tmp_path)
    inc = w.incident()
    rid = w.store.add_request("ack", inc)
    assert await w.runner.run_pending() == 1
    assert w.store.incident(inc).acknowledged
    assert w.store.ledger().acknowledged == {"kv_cache_insufficient": 5000.0}
    (req,) = w.store.requests()
    assert (req.id, req.state) == (rid, "done")
    assert "acknowledged" in req.result
    assert req.done_at is not None


async def test_next_step_runs_through_the_remediator_and_policy(tmp_path: Path) -> None:
    w = World(tmp_path)
    inc = w.incident()
    w.store.add_request("next_step", inc)
    await w.runner.run_pending()
    (action, *_) = w.store.actions(inc)
    assert action.name == "lower_max_model_len" and action.outcome == "ok"
    assert w.store.incident(inc).state == IncidentState.MITIGATING
    (req,) = w.store.requests()
    assert req.state == "done"
    assert "lower_max_model_len ok" in req.result


async def test_next_step_refused_by_policy_is_recorded(tmp_path: Path) -> None:
    w = World(tmp_path, mode="off")
    inc = w.incident()
    w.store.add_request("next_step", inc)
    await w.runner.run_pending()
    (action,) = w.store.actions(inc)
    assert (action.name, action.outcome) == ("plan", "refused")
    (req,) = w.store.requests()
    assert req.state == "done" and "remediation.mode is off" in req.result


async def test_next_step_on_a_resolved_incident_does_nothing(tmp_path: Path) -> None:
    w = World(tmp_path)
    inc = w.incident()
    w.store.update_incident(inc, state=IncidentState.RESOLVED, resolved_at=w.now)
    w.store.add_request("next_step", inc)
    await w.runner.run_pending()
    assert w.store.actions(inc) == []
    (req,) = w.store.requests()
    assert req.state == "done" and "nothing to do" in req.result


async def test_profile_captured_and_recorded(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.store.add_request("profile", None)
    await w.runner.run_pending()
    assert w.profiles == ["torch"]
    (req,) = w.store.requests()
    assert req.state == "done" and "trace.json" in req.result


async def test_failing_profile_is_recorded_and_the_next_request_still_runs(tmp_path: Path) -> None:
    w = World(tmp_path)
    inc = w.incident()
    w.profile_error = RuntimeError("profiling.enabled is off: the server has no profiler")
    w.store.add_request("profile", None)
    w.store.add_request("ack", inc)
    assert await w.runner.run_pending() == 2
    first, second = w.store.requests()
    assert first.state == "failed" and "profiling.enabled is off" in first.result
    assert second.state == "done"


async def test_unknown_incident_fails_the_request(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.store.add_request("ack", 42)
    await w.runner.run_pending()
    (req,) = w.store.requests()
    assert req.state == "failed" and req.result == "no incident #42"


async def test_done_requests_are_not_run_again(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.store.add_request("profile", None)
    await w.runner.run_pending()
    assert await w.runner.run_pending() == 0
    assert w.profiles == ["torch"]
