"""Verification on a real store with a scripted completion probe and a fake clock."""

from __future__ import annotations

from pathlib import Path

from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.verify import Verifier
from ascend_doctor.core.config import IncidentsConfig, RemediationConfig
from ascend_doctor.core.events import (
    ActionResult,
    Category,
    Finding,
    IncidentState,
    Outcome,
    Role,
    Severity,
)
from ascend_doctor.core.store import Store


def test_resolved_only_when_the_engine_answers(tmp_path: Path) -> None:
    import asyncio

    store = Store.in_dir(tmp_path)
    now = [1000.0]
    answers = [(False, "1-token completion failed: ReadTimeout"), (True, "1-token completion")]
    probes: list[str] = []

    async def probe(url: str, timeout: float) -> tuple[bool, str]:
        probes.append(url)
        return answers.pop(0)

    def record(incident_id: int, name: str, outcome: Outcome, why: str) -> None:
        store.add_action(incident_id, ActionResult(name, {}, outcome, why, now[0]))

    f = Finding("r", Category.SERVER_HANG, Severity.CRITICAL, Role.ROOT, "server", "s", at=990.0)
    inc = store.open_incident(f)
    store.add_action(inc.id, ActionResult("restart", {}, Outcome.OK, "restart", 995.0))
    store.update_incident(inc.id, state=IncidentState.MITIGATING)
    verifier = Verifier(
        IncidentManager(store, IncidentsConfig(), clock=lambda: now[0]),
        RemediationConfig(),
        record,
        lambda: "http://s",
        probe=probe,
        clock=lambda: now[0],
    )
    # the run that began at 996 is healthy but does not serve: the step did not help
    assert asyncio.run(verifier.check(996.0, lambda: 996.0)) == [inc.id]
    failed = store.actions(inc.id)[-1]
    assert (failed.name, failed.outcome) == ("verify", Outcome.FAILED)
    assert failed.reason == "/health 200 for 4s; 1-token completion failed: ReadTimeout"
    assert store.incident(inc.id).state == IncidentState.MITIGATING
    assert verifier.waiting(996.0) == []  # judged once per run
    # the next step and a new run that serves: resolved
    store.add_action(inc.id, ActionResult("restart", {}, Outcome.OK, "restart", 1001.0))
    now[0] = 1010.0
    assert asyncio.run(verifier.check(1002.0, lambda: 1002.0)) == []
    assert store.incident(inc.id).state == IncidentState.RESOLVED
    assert store.actions(inc.id)[-1].reason == "/health 200 for 8s; 1-token completion"
    assert probes == ["http://s", "http://s"]


def test_a_run_that_ends_during_the_probe_is_not_judged(tmp_path: Path) -> None:
    import asyncio

    store = Store.in_dir(tmp_path)

    async def probe(url: str, timeout: float) -> tuple[bool, str]:
        return False, "connection refused"

    f = Finding("r", Category.NPU_OOM, Severity.ERROR, Role.ROOT, "server", "s", at=1.0)
    inc = store.open_incident(f)
    store.add_action(inc.id, ActionResult("restart", {}, Outcome.OK, "restart", 2.0))
    store.update_incident(inc.id, state=IncidentState.MITIGATING)
    incidents = IncidentManager(store, IncidentsConfig())
    verifier = Verifier(incidents, RemediationConfig(), lambda *a: None, lambda: "u", probe=probe)
    assert asyncio.run(verifier.check(3.0, lambda: 9.0)) == []  # restarted meanwhile
    assert store.incident(inc.id).state == IncidentState.MITIGATING
