"""The decider: due incidents on one queue, stepped once per cause, and the one restart."""

from __future__ import annotations

import asyncio
import time

from ascend_doctor.agent.decider import Decider
from ascend_doctor.agent.remediation import StepResult
from ascend_doctor.agent.supervisor import ExitDecision
from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.events import ProcessState


class FakeProcess:
    """What the decider asks of the server: its state, whether it is dying, a restart."""

    def __init__(self) -> None:
        self.state = ProcessState.RUNNING
        self.pid: int | None = 42
        self.dying = False
        self.restarts: list[str] = []
        self.started = 0

    async def restart(self, reason: str) -> None:
        self.restarts.append(reason)

    def start(self) -> None:
        self.started += 1


class FakeHandle:
    def __init__(self) -> None:
        self.process = FakeProcess()

    @property
    def state(self) -> ProcessState:
        return self.process.state

    @property
    def dying(self) -> bool:
        return self.process.dying

    async def restart(self, reason: str) -> None:
        await self.process.restart(reason)

    def start(self) -> None:
        self.process.start()


class Steps:
    """A step that records its calls and can be held open by the test."""

    def __init__(self, result: StepResult) -> None:
        self.result = result
        self.calls: list[int] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, incident_id: int) -> StepResult:
        self.calls.append(incident_id)
        self.entered.set()
        await self.release.wait()
        return self.result


async def until(check: object, what: str, deadline: float = 5.0) -> None:
    end = time.monotonic() + deadline
    while not check():  # type: ignore[operator]
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def decider(steps: Steps, handle: FakeHandle) -> Decider:
    return Decider(steps, handle, RemediationConfig())  # type: ignore[arg-type]


async def test_due_incident_is_stepped_once_and_the_server_restarted_once() -> None:
    steps, handle = Steps(StepResult(restart=True)), FakeHandle()
    d = decider(steps, handle)
    task = asyncio.create_task(d.run())
    d.due(1, after=0.01)
    d.due(1, after=0.01)  # the same failure seen twice before its decision
    await until(lambda: handle.process.restarts, "the restart")
    task.cancel()
    assert steps.calls == [1]
    assert len(handle.process.restarts) == 1
    assert d.pending == []


async def test_evidence_during_a_step_does_not_run_the_next_step() -> None:
    """The server died, its exit runs the step (a device reset takes seconds); more evidence
    of the same failure arrives meanwhile and becomes due: it belongs to the failure being
    fixed, not to a failure of the fix."""
    steps, handle = Steps(StepResult(restart=True)), FakeHandle()
    d = decider(steps, handle)
    task = asyncio.create_task(d.run())
    d.due(7, after=60)  # found before the exit
    steps.release.clear()
    exit_decision = asyncio.create_task(d.on_exit())
    await asyncio.wait_for(steps.entered.wait(), 5)
    d.due(7, after=0)  # npu-smi still says Critical while the reset runs
    await until(lambda: d._queue.qsize() == 0 and not d._timers, "the evidence to be queued")
    steps.release.set()
    assert await asyncio.wait_for(exit_decision, 5) == ExitDecision.RESTART
    await asyncio.sleep(0.05)  # give the loop a turn to (wrongly) step it again
    task.cancel()
    assert steps.calls == [7]


async def test_a_dying_server_is_decided_on_at_its_exit() -> None:
    steps, handle = Steps(StepResult(restart=False, escalated=True)), FakeHandle()
    handle.process.dying = True
    d = decider(steps, handle)
    task = asyncio.create_task(d.run())
    d.due(3, after=0)
    await until(lambda: not d._queue.qsize() and d._timers, "the step to be deferred")
    assert steps.calls == []  # its exit is coming: wait for its last words
    assert await asyncio.wait_for(d.on_exit(), 5) == ExitDecision.STOP  # escalated: stopped
    task.cancel()
    assert steps.calls == [3]


async def test_a_cooldown_makes_the_incident_due_when_it_ends() -> None:
    steps, handle = Steps(StepResult(restart=False, retry_at=time.time() + 0.05)), FakeHandle()
    d = decider(steps, handle)
    task = asyncio.create_task(d.run())
    d.due(5, after=0)
    await until(lambda: len(steps.calls) >= 2, "the retry after the cooldown")
    task.cancel()
    assert steps.calls[:2] == [5, 5]


async def test_requested_step_restarts_through_the_one_place() -> None:
    steps, handle = Steps(StepResult(restart=True)), FakeHandle()
    d = decider(steps, handle)
    result = await d.step_now(9)
    assert result.restart and steps.calls == [9]
    assert handle.process.restarts == ["restarting the server to apply the remediation"]
