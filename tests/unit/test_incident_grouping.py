"""One fault is one incident (issue 19): findings of the same failure from another source, or
from the next failed start, join the incident already escalated for it instead of paging again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.remediation.registry import OPTIONAL
from ascend_doctor.core.config import IncidentsConfig
from ascend_doctor.core.events import ActionResult, Finding, IncidentState, Outcome
from ascend_doctor.core.store import Store
from ascend_doctor.rules import load_rules

RULES = load_rules()
BY_ID = {r.id: r for r in [*RULES.text, *RULES.thresholds]}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(tmp_path: Path) -> tuple[IncidentManager, Store, Clock]:
    store = Store.in_dir(tmp_path)
    clock = Clock()
    return IncidentManager(store, IncidentsConfig(window=120.0), clock=clock), store, clock


def finding(rule: str, clock: Clock, *, subject: str = "server", offset: int = -1) -> Finding:
    r = BY_ID[rule]
    return Finding(
        rule=rule,
        category=r.category,
        severity=r.severity,
        role=r.role,
        subject=subject,
        summary=rule,
        at=clock.now,
        path="server.log" if offset >= 0 else "",
        offset=offset,
        remediation=r.remediation,
    )


def test_npu_smi_after_an_escalated_heartbeat_loss_joins_it(world: Any) -> None:
    incidents, store, clock = world
    (first,) = incidents.ingest(
        [finding("drv-soft-fault-heartbeat-lost", clock, subject="npu0", offset=10)]
    )
    incidents.escalate(first, "device resets are not allowed")
    clock.now += 0.011  # 11 ms later npu-smi's Health column says Critical
    assert incidents.ingest([finding("npu-smi-health-not-ok", clock, subject="npu0")]) == []
    (only,) = store.incidents()
    assert only.id == first and only.state == IncidentState.ESCALATED
    assert [x.finding.rule for x in store.findings(first)] == [
        "drv-soft-fault-heartbeat-lost",
        "npu-smi-health-not-ok",
    ]


def test_the_plog_line_after_an_escalated_npu_smi_report_joins_it(world: Any) -> None:
    incidents, store, clock = world
    (first,) = incidents.ingest([finding("npu-smi-health-not-ok", clock, subject="npu0")])
    incidents.escalate(first, "device resets are not allowed")
    clock.now += 2
    late = [finding("rt-task-scheduler-lost-heartbeat", clock, offset=40)]  # subject server
    assert incidents.ingest(late) == []
    assert len(store.incidents()) == 1


def test_repeated_failed_starts_on_a_dead_card_are_one_incident(world: Any) -> None:
    incidents, store, clock = world
    (first,) = incidents.ingest([finding("rt-set-device-failed", clock, offset=100)])
    incidents.escalate(first, "no step left")
    for n in range(1, 6):  # each start fails the same way, the backoff capped at 60 s
        clock.now += 60
        assert incidents.ingest([finding("rt-set-device-failed", clock, offset=100 + n)]) == []
    assert len(store.incidents()) == 1
    assert len(store.findings(first)) == 6


def test_a_symptom_after_the_escalation_joins_the_root(world: Any) -> None:
    incidents, store, clock = world
    (first,) = incidents.ingest(
        [finding("drv-soft-fault-heartbeat-lost", clock, subject="npu3", offset=1)]
    )
    incidents.escalate(first, "refused")
    clock.now += 1
    assert incidents.ingest([finding("vllm-engine-dead", clock, offset=90)]) == []
    assert len(store.incidents()) == 1


def test_after_an_acknowledgement_or_a_quiet_window_the_fault_is_new(world: Any) -> None:
    incidents, _, clock = world
    (first,) = incidents.ingest([finding("rt-set-device-failed", clock, offset=1)])
    incidents.escalate(first, "no step left")
    clock.now += 121  # quiet for longer than the window
    (second,) = incidents.ingest([finding("rt-set-device-failed", clock, offset=2)])
    assert second != first
    incidents.escalate(second, "no step left")
    incidents.acknowledge(second)
    clock.now += 1  # acknowledged: a human has it; what comes next is new
    (third,) = incidents.ingest([finding("rt-set-device-failed", clock, offset=3)])
    assert third not in (first, second)


def test_a_resolved_incident_takes_only_older_evidence(world: Any) -> None:
    incidents, _, clock = world
    (first,) = incidents.ingest(
        [finding("drv-soft-fault-heartbeat-lost", clock, subject="npu3", offset=1)]
    )
    late = finding("npu-smi-health-not-ok", clock, subject="npu3")  # sampled before the fix
    clock.now += 10
    incidents.resolve(first, "verified")
    assert incidents.ingest([late]) == []
    clock.now += 1  # after verification: the card failed again
    (again,) = incidents.ingest([finding("npu-smi-health-not-ok", clock, subject="npu3")])
    assert again != first


@pytest.mark.parametrize(
    ("recorded", "step", "fresh"),
    [
        ((), 0, True),  # nothing decided yet
        (("collect_diagnostics", "capture_profile"), 0, True),  # a doctor died in step 1
        (("collect_diagnostics", "plan"), 0, False),  # a cooldown's deferral: it waits
        (("corroborate",), 0, False),  # held for a second signal
        (("capture_profile",), 1, False),  # an observing step, counted
    ],
)
def test_an_open_incident_with_only_optional_actions_is_undecided(
    tmp_path: Path, recorded: tuple[str, ...], step: int, fresh: bool
) -> None:
    store, clock = Store.in_dir(tmp_path), Clock()
    incidents = IncidentManager(store, IncidentsConfig(), clock=clock)
    incidents.optional = OPTIONAL  # what the remediator tells it
    (inc_id,) = incidents.ingest([finding("rt-aicore-exception", clock, offset=1)])
    for name in recorded:
        store.add_action(inc_id, ActionResult(name, {}, Outcome.REFUSED, "r", clock.now))
    store.update_incident(inc_id, step=step)
    clock.now += 1
    again = incidents.ingest([finding("rt-aicore-exception", clock, offset=2)])
    assert again == ([inc_id] if fresh else [])
    assert store.incident(inc_id).state == IncidentState.OPEN


@pytest.mark.parametrize(
    ("recorded", "promoted"),
    [
        ((), True),
        ((("corroborate", Outcome.REFUSED),), True),  # held for a second signal: nothing acted
        ((("plan", Outcome.REFUSED),), True),  # a cooldown deferral
        ((("collect_diagnostics", Outcome.OK),), True),  # optional: it only looked
        ((("restart", Outcome.OK),), False),  # a step acted: its plan stays
        ((("restart", Outcome.SUGGESTED),), False),  # suggested to the operator: decided
    ],
)
def test_a_root_after_its_symptom_takes_the_incident_while_nothing_acted(
    tmp_path: Path, recorded: tuple[tuple[str, Outcome], ...], promoted: bool
) -> None:
    """A symptom opens the incident; its root arrives within the window. While the symptom's
    incident only waited or looked, the root gives it its category and plan; once something
    was decided for it, that plan stays and the root opens an incident of its own."""
    store, clock = Store.in_dir(tmp_path), Clock()
    incidents = IncidentManager(store, IncidentsConfig(window=120.0), clock=clock)
    incidents.optional = OPTIONAL
    (inc_id,) = incidents.ingest([finding("cpp-terminate", clock, offset=1)])
    for name, outcome in recorded:
        store.add_action(inc_id, ActionResult(name, {}, outcome, "r", clock.now))
    clock.now += 5
    again = incidents.ingest([finding("torch-npu-oom", clock, offset=2)])
    inc = store.incident(inc_id)
    if promoted:
        assert again == [inc_id]
        assert (inc.category.value, inc.rule) == ("npu_oom", "torch-npu-oom")
        assert inc.plan == BY_ID["torch-npu-oom"].remediation
        assert len(store.findings(inc_id)) == 2
    else:  # the root opens its own incident, with its own plan
        (other,) = again
        assert other != inc_id
        assert store.incident(other).rule == "torch-npu-oom"
        assert inc.rule == "cpp-terminate"
        assert len(store.findings(inc_id)) == 1
