"""If supervision itself dies, the doctor exits non-zero at once (systemd restarts it whole),
never lingers without eyes: each vital loop isolates its own failures, and one that ends
anyway stops the doctor."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from ascend_doctor.agent.daemon import Daemon
from ascend_doctor.core.config import Config
from ascend_doctor.core.tasks import Lifeline
from ascend_doctor.rules import load_rules

pytestmark = pytest.mark.integration


async def _broken() -> None:
    await asyncio.sleep(0)
    raise RuntimeError("a bug outside the loop's guard")


@pytest.mark.parametrize("part", ["decider", "logs", "requests"])
async def test_a_vital_loop_that_dies_stops_the_doctor_non_zero(
    tmp_path: Path, part: str, caplog: pytest.LogCaptureFixture
) -> None:
    daemon = Daemon(Config(), tmp_path / "state", None, load_rules(), base_env=dict(os.environ))
    getattr(daemon, part).run = _broken
    with caplog.at_level(logging.CRITICAL, logger="ascend_doctor.core.tasks"):
        rc = await asyncio.wait_for(daemon.run(), 30)
    assert rc == 1
    (record,) = [r for r in caplog.records if "loop ended" in r.getMessage()]
    assert "RuntimeError: a bug outside the loop's guard" in record.getMessage()
    assert "to be restarted whole" in record.getMessage()


async def test_stopping_cancels_the_loops_without_alarm() -> None:
    stop = asyncio.Event()
    forever = asyncio.create_task(asyncio.Event().wait(), name="tail")
    other = asyncio.create_task(_broken(), name="alerts")  # not vital: its own business
    lifeline = Lifeline(stop, [forever, other], ("tail",))
    await asyncio.wait([other])
    assert not stop.is_set() and lifeline.ended == ""
    stop.set()
    forever.cancel()
    await asyncio.wait([forever])
    assert lifeline.ended == ""
