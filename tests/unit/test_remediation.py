"""Remediation decisions on a real store: what fits, floors, refusals, attempts, escalation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.remediation import Context, HostTools, Remediator
from ascend_doctor.agent.remediation.policy import acknowledge_incident
from ascend_doctor.agent.remediation.recovery import recover
from ascend_doctor.core.config import IncidentsConfig, RemediationConfig
from ascend_doctor.core.events import (
    Category,
    Finding,
    IncidentState,
    Outcome,
    Role,
    Severity,
)
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.core.records import InFlight
from ascend_doctor.core.store import Store
from ascend_doctor.rules import load_rules
from tests.fakes import FakeServer

RULES = load_rules()
STEPS = {r.id: r.remediation for r in RULES.text}


class World:
    def __init__(self, tmp_path: Path, argv: tuple[str, ...], **policy: object) -> None:
        self.store = Store.in_dir(tmp_path)
        self.base = LaunchSpec(argv)
        self.now = 1000.0
        self.server = FakeServer(
            lambda: self.base.apply(self.store.overrides()),
            base_env={"ASCEND_RT_VISIBLE_DEVICES": "3"},
        )
        self.stopped = self.server.stopped
        self.ctx = Context(
            config=RemediationConfig(**policy),  # type: ignore[arg-type]
            store=self.store,
            server=self.server,
            host=HostTools(npu_smi="npu-smi", npu_smi_timeout=1.0),
            sleep=lambda s: asyncio.sleep(0),
            clock=lambda: self.now,
        )
        self.incidents = IncidentManager(self.store, IncidentsConfig(), clock=lambda: self.now)
        self.remediator = Remediator(self.ctx, self.incidents, RULES)

    def finding(self, rule: str, captures: dict[str, str], offset: int, **kw: object) -> Finding:
        r = next(x for x in RULES.text if x.id == rule)
        return Finding(
            rule=rule,
            category=r.category,
            severity=r.severity,
            role=r.role,
            subject=str(kw.get("subject", "server")),
            summary="s",
            at=self.now,
            captures=captures,
            path="server.log",
            offset=offset,
            remediation=r.remediation,
        )


KV = {"max_model_len": "32768", "estimate": "16162"}


async def test_lower_max_model_len_to_estimate_rounded_to_block(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m", "--max-model-len", "32768"))
    (inc_id,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", KV, 10)])
    result = await w.remediator.remediate(inc_id)
    assert result.restart
    (action,) = w.store.actions(inc_id)
    assert action.name == "lower_max_model_len" and action.outcome == "ok"
    assert action.params["to"] == 16128 and action.params["from"] == 32768
    assert w.ctx.spec().flag("--max-model-len") == "16128"
    assert w.store.incident(inc_id).state == IncidentState.MITIGATING


async def test_block_size_flag_is_respected(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m", "--max-model-len", "32768", "--block-size", "512"))
    (inc_id,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", KV, 10)])
    await w.remediator.remediate(inc_id)
    assert w.store.actions(inc_id)[0].params["to"] == 15872


async def test_old_wording_uses_kv_token_count(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    caps = {"max_model_len": "32768", "kv_tokens": "20752"}
    (inc_id,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-tokens", caps, 10)])
    await w.remediator.remediate(inc_id)
    assert w.store.actions(inc_id)[0].params["to"] == 20736


async def test_floor_refuses_and_escalates(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"), min_max_model_len=20000)
    (inc_id,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", KV, 10)])
    result = await w.remediator.remediate(inc_id)
    assert not result.restart and result.escalated
    refused, escalate = w.store.actions(inc_id)
    assert refused.outcome == "refused" and "below the floor 20000" in refused.reason
    assert escalate.name == "escalate"
    assert w.store.incident(inc_id).state == IncidentState.ESCALATED
    assert w.store.overrides() == []


async def test_same_root_after_restart_runs_next_step_then_escalates(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    oom = "torch-npu-oom"
    (inc_id,) = w.incidents.ingest([w.finding(oom, {"device": "0"}, 10)])
    await w.remediator.remediate(inc_id)
    w.now += 10
    w.incidents.note_start(w.now)
    w.now += 10
    assert w.incidents.ingest([w.finding(oom, {"device": "0"}, 20)]) == [inc_id]
    await w.remediator.remediate(inc_id)
    names = [a.name for a in w.store.actions(inc_id)]
    assert names == [
        "set_env",
        "lower_gpu_memory_utilization",
        "restart",
        "lower_max_num_seqs",
        "restart",
    ]
    w.now += 10
    w.incidents.note_start(w.now)
    w.now += 10
    w.incidents.ingest([w.finding(oom, {"device": "0"}, 30)])
    result = await w.remediator.remediate(inc_id)
    assert result.escalated
    assert w.store.actions(inc_id)[-1].reason == "no remediation step left"


async def test_same_root_before_the_restart_does_not_count(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 10)])
    await w.remediator.remediate(inc_id)
    w.now += 1  # another line of the same crash, read before the server was restarted
    assert w.incidents.ingest([w.finding("torch-npu-oom", {}, 99)]) == []


async def test_attempt_limit(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"), max_attempts=1)
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 10)])
    await w.remediator.remediate(inc_id)
    result = await w.remediator.remediate(inc_id)
    assert result.escalated
    assert "1 attempt made (limit 1)" in w.store.actions(inc_id)[-1].reason


async def test_symptom_joins_root_and_duplicates_are_dropped(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    root = w.finding("torch-npu-oom", {}, 10)
    symptom = w.finding("vllm-engine-dead", {}, 50)
    assert len(w.incidents.ingest([symptom, root])) == 1
    assert w.incidents.ingest([root, symptom]) == []  # delivered again after a restart
    (inc,) = w.store.incidents()
    assert inc.category == Category.NPU_OOM
    assert [f.finding.rule for f in w.store.findings(inc.id)] == [
        "torch-npu-oom",
        "vllm-engine-dead",
    ]


async def test_symptom_alone_opens_its_own_incident(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    w.incidents.ingest([w.finding("vllm-engine-dead", {}, 50)])
    (inc,) = w.store.incidents()
    assert inc.category == Category.ENGINE_DEAD


@pytest.mark.parametrize("mode", ["suggest", "dry_run"])
async def test_suggest_and_dry_run_change_nothing(tmp_path: Path, mode: str) -> None:
    policy = {"mode": "suggest"} if mode == "suggest" else {"dry_run": True}
    w = World(tmp_path, ("vllm", "serve", "m", "--max-model-len", "32768"), **policy)
    (inc_id,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", KV, 10)])
    result = await w.remediator.remediate(inc_id)
    assert not result.restart
    (action,) = w.store.actions(inc_id)
    assert action.outcome == ("suggested" if mode == "suggest" else "dry_run")
    assert action.params["to"] == 16128
    assert w.store.overrides() == []


async def test_device_reset_refused_unless_allowed(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    f = w.finding("drv-soft-fault-heartbeat-lost", {"device": "3"}, 10, subject="npu3")
    (inc_id,) = w.incidents.ingest([f])
    result = await w.remediator.remediate(inc_id)
    assert result.escalated
    snapshot, refused = w.store.actions(inc_id)[:2]
    assert snapshot.name == "collect_diagnostics"  # always taken before a destructive step
    assert refused.outcome == "refused"
    assert "allow_device_reset = false" in refused.reason
    assert w.stopped == []


async def test_device_reset_refused_for_a_device_the_server_does_not_use(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"), allow_device_reset=True)
    f = w.finding("drv-soft-fault-heartbeat-lost", {"device": "5"}, 10, subject="npu5")
    (inc_id,) = w.incidents.ingest([f])
    result = await w.remediator.remediate(inc_id)
    assert "device 5 is not used by this server ([3])" in w.store.actions(inc_id)[1].reason
    assert w.store.incident(inc_id).state == IncidentState.ESCALATED
    assert not result.escalated, "a card this server does not use must not stop the server"


def test_severity_labels() -> None:
    assert Severity.parse("critical") == Severity.CRITICAL
    assert Role("symptom") == Role.SYMPTOM


async def test_root_after_its_symptom_becomes_the_incident_root(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    w.incidents.ingest([w.finding("vllm-engine-dead", {}, 50)])
    w.now += 1
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 10)])
    (inc,) = w.store.incidents()
    assert inc.id == inc_id
    assert inc.category == Category.NPU_OOM and inc.rule == "torch-npu-oom"


async def test_other_roots_close_in_time_join_the_first(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    kv = w.finding("vllm-kv-cache-max-len-estimate", KV, 10)
    oom = w.finding("torch-npu-oom", {}, 20)
    assert len(w.incidents.ingest([kv, oom])) == 1
    (inc,) = w.store.incidents()
    assert inc.category == Category.KV_CACHE_INSUFFICIENT
    assert len(w.store.findings(inc.id)) == 2


async def test_enforce_eager_and_hccl_timeout_actions(tmp_path: Path) -> None:
    from ascend_doctor.agent.remediation.context import Evidence as Ev
    from ascend_doctor.agent.remediation.launch_actions import enforce_eager, raise_hccl_timeout

    w = World(tmp_path, ("vllm", "serve", "m"))
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 10)])
    inc = w.store.incident(inc_id)
    done = await enforce_eager(w.ctx, inc, {}, Ev({}))
    assert done.outcome == "ok" and done.override == ("--enforce-eager", "flag", "")
    refused = await raise_hccl_timeout(w.ctx, inc, {}, Ev({}))
    assert refused.outcome == "refused" and "no evidence of slow ranks" in refused.reason


async def test_collect_diagnostics_snapshots_logs(tmp_path: Path) -> None:
    from ascend_doctor.agent.remediation.context import Evidence as Ev
    from ascend_doctor.agent.remediation.device_actions import collect_diagnostics
    from ascend_doctor.collectors.evidence import Keeper

    log = tmp_path / "server.log"
    log.write_text("line one\nline two\n")
    w = World(tmp_path, ("vllm", "serve", "m"))
    w.ctx.host.evidence = Keeper(
        tmp_path / "diag",
        keep=5,
        max_bytes=1 << 20,
        pids=list,
        devices=lambda: [3],
        log_paths=lambda: [str(log)],
        npu_smi=str(tmp_path / "no-npu-smi"),
        metrics_url=lambda: "",
    )
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 10)])
    done = await collect_diagnostics(w.ctx, w.store.incident(inc_id), {}, Ev({}))
    assert done.outcome == "ok"
    snap = Path(done.params["dir"])
    assert snap.name.startswith(f"incident-{inc_id}-")
    assert (snap / "tail-0-server.log").read_text() == "line one\nline two\n"
    said = (snap / "npu-smi-health-3.txt").read_text()
    assert said.startswith("npu-smi info -t health -i 3: npu-smi not found")
    assert "npu-smi-ecc-3.txt" in done.params["files"]


async def test_collect_diagnostics_without_a_place_is_refused(tmp_path: Path) -> None:
    from ascend_doctor.agent.remediation.context import Evidence as Ev
    from ascend_doctor.agent.remediation.device_actions import collect_diagnostics

    w = World(tmp_path, ("vllm", "serve", "m"))
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 10)])
    done = await collect_diagnostics(w.ctx, w.store.incident(inc_id), {}, Ev({}))
    assert done.outcome == "refused"


async def test_a_reused_path_is_not_a_duplicate(tmp_path: Path) -> None:
    import dataclasses

    w = World(tmp_path, ("vllm", "serve", "m"))
    old = dataclasses.replace(w.finding("torch-npu-oom", {}, 10), file_id="64768:1001")
    new = dataclasses.replace(old, file_id="64768:1002")  # same path and offset, rotated file
    w.incidents.ingest([old])
    w.incidents.ingest([old])  # delivered again: dropped
    w.incidents.ingest([new])
    assert len(w.store.findings()) == 2


async def test_observing_only_suggests_what_would_change_the_server(tmp_path: Path) -> None:
    w = World(tmp_path, ())
    w.server.supervised = False
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 10)])
    result = await w.remediator.remediate(inc_id)
    assert not result.restart
    outcomes = [(a.name, a.outcome.value) for a in w.store.actions(inc_id)]
    assert outcomes == [
        ("set_env", "suggested"),
        ("lower_gpu_memory_utilization", "suggested"),
        ("restart", "suggested"),
    ]
    assert w.store.overrides() == []


async def test_optional_actions_do_not_block_the_restart(tmp_path: Path) -> None:
    from ascend_doctor.core.events import Sample
    from ascend_doctor.rules import Engine

    w = World(tmp_path, ("vllm", "serve", "m"))
    engine = Engine(RULES)
    values = {"health_status": 200, "running": 2, "generation_tokens_delta": 0}
    engine.evaluate([Sample("vllm", "server", 0, values)])
    (hang,) = engine.evaluate([Sample("vllm", "server", 60, values)])
    (inc_id,) = w.incidents.ingest([hang])
    result = await w.remediator.remediate(inc_id)
    assert result.restart
    assert [(a.name, a.outcome.value) for a in w.store.actions(inc_id)] == [
        ("collect_diagnostics", "refused"),
        ("capture_profile", "refused"),
        ("restart", "ok"),
    ]


async def test_host_budget_is_reserved_and_persists(tmp_path: Path) -> None:
    w = World(
        tmp_path,
        ("vllm", "serve", "m", "--max-model-len", "32768"),
        budget_per_hour=2,
        action_cooldown=0,
    )
    for rule, caps in (("vllm-kv-cache-max-len-estimate", KV), ("torch-npu-oom", {})):
        (inc_id,) = w.incidents.ingest([w.finding(rule, caps, 10)])
        assert (await w.remediator.remediate(inc_id)).restart
        w.store.update_incident(inc_id, state=IncidentState.RESOLVED)
        w.now += 60
    # a new doctor (a crash loop restarts it) reads the same budget from the store
    fresh = Remediator(w.ctx, w.incidents, RULES)
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 30)])
    result = await fresh.remediate(inc_id)
    assert result.escalated and not result.restart
    refused = w.store.actions(inc_id)[0]
    assert w.store.overrides()[-1].incident_id != inc_id  # nothing was changed for it
    assert refused.outcome == "refused"
    assert refused.reason == "host budget of 2 remediations per hour is used up"
    w.now += 3600  # an hour later the budget is back
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 40)])
    assert (await fresh.remediate(inc_id)).restart


async def test_circuit_breaker_until_acknowledged(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"), breaker_count=2, budget_per_hour=100)
    for offset in (10, 20):
        (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, offset)])
        assert (await w.remediator.remediate(inc_id)).restart
        w.store.update_incident(inc_id, state=IncidentState.RESOLVED)
        w.now += 600
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 30)])
    result = await w.remediator.remediate(inc_id)
    assert result.escalated
    assert "npu_oom was remediated 2 times in 24h: a human must look" in (
        w.store.actions(inc_id)[0].reason
    )
    acknowledge_incident(w.incidents, inc_id, lambda: w.now)  # what `incidents ack` does
    w.now += 1
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 40)])
    assert (await w.remediator.remediate(inc_id)).restart


async def test_corrupt_budget_record_fails_closed(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    w.store.set_meta("remediation.ledger", {"history": {"not": "a list"}})
    (inc_id,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 10)])
    result = await w.remediator.remediate(inc_id)
    assert result.escalated and not result.restart
    assert w.store.actions(inc_id)[0].reason.startswith(
        "budget record unreadable, failing closed: store record 'remediation.ledger' is not a"
        " Ledger"
    )
    assert w.store.overrides() == []


async def test_cooldown_defers_the_same_action_and_survives_a_new_doctor(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m", "--max-model-len", "32768"), action_cooldown=120)
    (first,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", KV, 10)])
    assert (await w.remediator.remediate(first)).restart
    w.store.update_incident(first, state=IncidentState.RESOLVED)
    w.now += 30
    fresh = Remediator(
        w.ctx, w.incidents, RULES
    )  # a restarted doctor reads the cooldown from the store
    kv = {"max_model_len": "16128", "estimate": "8000"}
    (second,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", kv, 20)])
    result = await fresh.remediate(second)
    assert not result.restart and not result.escalated
    assert result.retry_at == pytest.approx(w.now + 90)
    (deferred,) = w.store.actions(second)
    assert deferred.outcome == "refused"
    assert deferred.reason == "lower_max_model_len is cooling down: the step waits 90s"
    assert w.store.incident(second).state == IncidentState.OPEN
    assert fresh.policy.remaining()["cooling_down_s"] == {"lower_max_model_len": 90}
    assert fresh.policy.remaining()["budget_left"] == 5  # a deferral books no budget
    w.now += 90
    assert (await fresh.remediate(second)).restart
    assert w.ctx.spec().flag("--max-model-len") == "7936"


class Killed(BaseException):
    """SIGKILL at one line of the remediator: nothing after it runs, nothing more is written."""


def _kill_when_counting(w: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The doctor dies after the step's last action was recorded, before the step is counted:
    from then on it writes nothing (a dead process's ``finally`` blocks do not run)."""
    dead = []
    write = w.store.set_inflight

    def set_inflight(flight: InFlight | None) -> None:
        if not dead:
            write(flight)

    def stepped(incident_id: int, *, applied: bool) -> None:
        dead.append(incident_id)
        raise Killed

    monkeypatch.setattr(w.store, "set_inflight", set_inflight)
    monkeypatch.setattr(w.incidents, "stepped", stepped)


async def _next_doctor(w: World) -> tuple[IncidentManager, Remediator]:
    """A new doctor on the world's store, past its recovery of the one before."""
    incidents = IncidentManager(w.store, IncidentsConfig(), clock=lambda: w.now)
    remediator = Remediator(w.ctx, incidents, RULES)
    await recover(w.ctx, incidents, remediator.record)
    return incidents, remediator


async def test_a_doctor_killed_before_counting_a_step_leaves_it_to_the_next_to_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    (inc_id,) = w.incidents.ingest([w.finding("rt-aicore-exception", {}, 10)])
    _kill_when_counting(w, monkeypatch)
    with pytest.raises(Killed):
        await w.remediator.remediate(inc_id)
    monkeypatch.undo()
    assert [a.name for a in w.store.actions(inc_id)] == ["collect_diagnostics", "restart"]
    assert w.store.incident(inc_id).step == 0, "killed before the count"
    assert w.store.inflight() is not None, "what the next doctor needs to count it"

    w.now += 5  # a new doctor: its recovery, then the server's start, then the failure again
    incidents, remediator = await _next_doctor(w)
    inc = w.store.incident(inc_id)
    assert (inc.step, inc.state) == (1, IncidentState.MITIGATING)
    assert w.store.inflight() is None
    assert [a.name for a in w.store.actions(inc_id)] == ["collect_diagnostics", "restart"]
    incidents.note_start(w.now)
    w.now += 1
    # without the count the incident stayed open with actions: no recurrence was ever "fresh"
    # and the plan never went on (CI's test_a_doctor_killed_mid_plan, one run in many)
    assert incidents.ingest([w.finding("rt-aicore-exception", {}, 20)]) == [inc_id]
    assert (await remediator.remediate(inc_id)).escalated
    names = [a.name for a in w.store.actions(inc_id)]
    assert names == ["collect_diagnostics", "restart", "escalate"]


async def test_a_doctor_killed_after_the_diagnostics_leaves_the_step_to_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    (inc_id,) = w.incidents.ingest([w.finding("rt-aicore-exception", {}, 10)])
    dead = []

    def set_inflight(flight: InFlight | None) -> None:  # the restart's record: killed first
        dead.append(flight)
        raise Killed

    monkeypatch.setattr(w.store, "set_inflight", set_inflight)
    with pytest.raises(Killed):
        await w.remediator.remediate(inc_id)
    monkeypatch.undo()
    assert [f.action for f in dead if f is not None] == ["restart"]
    assert [a.name for a in w.store.actions(inc_id)] == ["collect_diagnostics"]
    assert w.store.inflight() is None, "collect_diagnostics, optional, leaves none"

    w.now += 5  # a new doctor: nothing for recovery, the server starts, the failure again
    incidents, remediator = await _next_doctor(w)  # it names the optional actions
    incidents.note_start(w.now)
    w.now += 1
    # only diagnostics recorded: nothing was decided, the step runs again (it was stuck open)
    assert incidents.ingest([w.finding("rt-aicore-exception", {}, 20)]) == [inc_id]
    assert (await remediator.remediate(inc_id)).restart
    names = [a.name for a in w.store.actions(inc_id)]
    assert names == ["collect_diagnostics", "collect_diagnostics", "restart"]
    inc = w.store.incident(inc_id)
    assert (inc.step, inc.state) == (1, IncidentState.MITIGATING)
    assert w.store.inflight() is None
    # one step, booked once against the host budget and the breaker, though it ran twice
    booked = w.store.ledger().history
    assert len(booked) == 1
    assert [(e.category, e.incident, e.step) for e in booked] == [("aicore_error", inc_id, 0)]


async def test_a_failed_action_recorded_before_the_doctor_died_goes_to_a_human(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"))
    (inc_id,) = w.incidents.ingest([w.finding("rt-aicore-exception", {}, 10)])
    w.store.set_inflight(InFlight(inc_id, "restart", None, w.now, 0))
    w.now += 1
    w.remediator.record(inc_id, "restart", Outcome.FAILED, "the server did not stop", {})
    await recover(w.ctx, w.incidents, w.remediator.record)
    inc = w.store.incident(inc_id)
    assert (inc.step, inc.state) == (1, IncidentState.ESCALATED)
    assert w.store.inflight() is None
    (restart,) = w.store.actions(inc_id)
    assert restart.outcome == Outcome.FAILED, "recorded once: no 'interrupted' beside it"


async def test_attach_mode_suggests_the_exact_flag_and_restarts_only_by_command(
    tmp_path: Path,
) -> None:
    w = World(tmp_path, ("vllm", "serve", "m", "--max-model-len", "32768"))
    w.server.supervised, w.server.attached, w.server.can_restart = False, True, True
    (inc_id,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", KV, 10)])
    result = await w.remediator.remediate(inc_id)
    assert not result.restart  # restarting without the change would not help
    (lower,) = w.store.actions(inc_id)
    assert lower.outcome == "suggested"
    assert lower.params["change"] == "--max-model-len 16128"
    assert "change the server's launch yourself: --max-model-len 16128" in lower.reason
    assert w.store.overrides() == []  # nothing the doctor cannot apply is stored
    (oom,) = w.incidents.ingest([w.finding("torch-npu-oom", {}, 20)])
    assert not (await w.remediator.remediate(oom)).restart
    assert [(a.name, a.outcome) for a in w.store.actions(oom)] == [
        ("set_env", "suggested"),
        ("lower_gpu_memory_utilization", "suggested"),
        ("restart", "suggested"),
    ]
    assert w.store.actions(oom)[0].params["change"] == (
        "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True"
    )
    # a plain restart goes through the operator's restart command
    (aic,) = w.incidents.ingest([w.finding("rt-aicore-exception", {}, 30)])
    assert (await w.remediator.remediate(aic)).restart
    assert [(a.name, a.outcome) for a in w.store.actions(aic)][-1] == ("restart", "ok")
    assert w.store.actions(aic)[-1].reason == "restart through the restart command"
    # without a restart command even that is left to the operator
    v = World(tmp_path / "no-command", ("vllm", "serve", "m"))
    v.server.supervised, v.server.attached = False, True
    (aic,) = v.incidents.ingest([v.finding("rt-aicore-exception", {}, 30)])
    assert not (await v.remediator.remediate(aic)).restart
    assert v.store.actions(aic)[-1].outcome == "suggested"


async def test_lower_max_model_len_computed_from_kv_memory_without_an_estimate(
    tmp_path: Path,
) -> None:
    w = World(tmp_path, ("vllm", "serve", "m", "--max-model-len", "32768"))
    caps = {"max_model_len": "32768", "needed_gib": "6.00", "available_gib": "2.89"}
    (inc_id,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", caps, 10)])
    assert (await w.remediator.remediate(inc_id)).restart
    (action,) = w.store.actions(inc_id)
    # 32768 tokens need 6.00 GiB: 2.89 GiB hold 15783 tokens, 15744 in whole 128-token blocks
    assert action.params["fits"] == 15783 and action.params["to"] == 15744
    assert action.params["evidence"].startswith("the available KV cache memory")


async def test_reset_cooldown_is_kept_per_device(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m"), allow_device_reset=True)
    w.server.base_env = {"ASCEND_RT_VISIBLE_DEVICES": "3,6"}
    w.base = LaunchSpec(("vllm", "serve", "m", "--tensor-parallel-size", "2"))
    w.remediator.policy.ran("reset_device:npu3")
    w.now += 60
    wait = w.remediator.policy.cooldown(["collect_diagnostics", "reset_device:npu3"])
    assert wait == ("reset_device:npu3", 540.0)
    assert w.remediator.policy.cooldown(["reset_device:npu6"]) is None
    f = w.finding("drv-soft-fault-heartbeat-lost", {"device": "3"}, 10, subject="npu3")
    (inc_id,) = w.incidents.ingest([f])
    result = await w.remediator.remediate(inc_id)
    assert result.retry_at == pytest.approx(w.now + 540)
    assert w.store.actions(inc_id)[0].reason == (
        "reset_device:npu3 is cooling down: the step waits 540s"
    )


async def test_a_step_whose_record_failed_after_it_acted_is_settled_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The action ran (the launch was changed) but the store could not record it: the step
    raised and was not counted. When the failure comes back the step is not run again on a
    server it already changed: its outcome is unknown, so the incident goes to a human, as a
    dead doctor's interrupted action does."""
    from ascend_doctor.core.errors import StoreError

    w = World(tmp_path, ("vllm", "serve", "m", "--max-model-len", "32768"))
    (inc_id,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", KV, 10)])
    add_action, changes = w.store.add_action, []
    set_override = w.store.set_override

    def failing(incident_id: int, result: object) -> None:
        if getattr(result, "name", "") == "lower_max_model_len":
            raise StoreError("database or disk is full")
        add_action(incident_id, result)  # type: ignore[arg-type]

    def counted(*args: object, **kw: object) -> None:
        changes.append(args)
        set_override(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(w.store, "add_action", failing)
    monkeypatch.setattr(w.store, "set_override", counted)
    with pytest.raises(StoreError):
        await w.remediator.remediate(inc_id)
    monkeypatch.setattr(w.store, "add_action", add_action)
    assert len(changes) == 1 and w.ctx.spec().flag("--max-model-len") == "16128"
    assert w.store.inflight() is not None, "left for the next decision"

    w.now += 30  # the failure again: the incident is due
    assert w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", KV, 20)]) == [inc_id]
    result = await w.remediator.remediate(inc_id)
    assert not result.restart
    assert len(changes) == 1, "the launch was not changed a second time"
    actions = [(a.name, a.outcome.value) for a in w.store.actions(inc_id)]
    assert actions == [("lower_max_model_len", "unknown")]
    assert "interrupted: a store write failed while lower_max_model_len ran" in (
        w.store.actions(inc_id)[0].reason
    )
    assert w.store.incident(inc_id).state == IncidentState.ESCALATED
    assert w.store.inflight() is None


async def test_an_unreadable_record_of_the_action_in_flight_fails_closed(tmp_path: Path) -> None:
    w = World(tmp_path, ("vllm", "serve", "m", "--max-model-len", "32768"))
    w.store.set_meta("remediation.inflight", {"incident_id": "not a number"})
    (inc_id,) = w.incidents.ingest([w.finding("vllm-kv-cache-max-len-estimate", KV, 10)])
    result = await w.remediator.remediate(inc_id)
    assert result.escalated and not result.restart
    assert w.store.overrides() == []
    assert w.store.actions(inc_id)[0].reason.startswith(
        "the record of the action in flight is unreadable, failing closed"
    )
