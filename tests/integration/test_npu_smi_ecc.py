"""ECC counters end to end: the simulator's ``npu-smi info -t ecc``, the collector's reads at
their own interval, the finding of a rise, the daemon's store and metrics."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from ascend_doctor.agent.daemon import Daemon
from ascend_doctor.collectors.npu_smi import NpuSmiCollector
from ascend_doctor.core.config import CollectorsConfig, Config, LogsConfig, NpuSmiConfig
from ascend_doctor.core.store import Store
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.sim.host import SimHost
from tests.conftest import wait_for

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ecc_calls(host: SimHost) -> list[list[str]]:
    return [c["argv"] for c in host.npu_smi_calls() if "ecc" in c["argv"]]


async def test_counters_are_read_every_interval_and_kept_on_every_sample(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host")
    clock = Clock()
    collector = NpuSmiCollector(
        str(host.bin_dir / "npu-smi"), timeout=10, ecc_interval=60.0, clock=clock, board=False
    )
    first = {s.subject: s.values for s in await collector.collect()}
    assert len(ecc_calls(host)) == 8  # one per card
    assert first["npu5"]["hbm_ecc_double_bit_errors"] == 0
    assert first["npu5"]["hbm_ecc_single_bit_isolated_pages"] == 0
    host.inject(5, "hbm_ecc")
    clock.now += 30.0  # within the interval: the main table only, the last counters kept
    second = {s.subject: s.values for s in await collector.collect()}
    assert len(ecc_calls(host)) == 8
    assert second["npu5"]["hbm_ecc_double_bit_errors"] == 0
    clock.now += 31.0
    third = {s.subject: s.values for s in await collector.collect()}
    assert len(ecc_calls(host)) == 16
    assert third["npu5"]["hbm_ecc_double_bit_errors"] == 1
    assert third["npu5"]["hbm_ecc_double_bit_total"] == 1
    assert third["npu5"]["hbm_ecc_double_bit_isolated_pages"] == 1
    assert third["npu4"]["hbm_ecc_double_bit_errors"] == 0


async def test_a_rise_is_a_critical_device_fault_and_old_counts_only_a_report(
    tmp_path: Path,
) -> None:
    host = SimHost.create(tmp_path / "host")
    host.inject(2, "hbm_ecc")  # an error from before the doctor started
    host.repair(2)  # the card was reset since: healthy, its counters keep the error
    collector = NpuSmiCollector(str(host.bin_dir / "npu-smi"), timeout=10, ecc_interval=1e-9)
    engine = Engine(load_rules())
    before = engine.evaluate(await collector.collect())
    assert [(f.rule, f.subject, f.severity.label, f.remediation) for f in before] == [
        ("npu-smi-hbm-ecc-uncorrectable", "npu2", "warning", ())
    ]
    assert engine.evaluate(await collector.collect()) == []  # the same count: nothing new
    host.inject(6, "hbm_ecc")
    found = engine.evaluate(await collector.collect())
    rise = [f for f in found if f.rule == "npu-smi-hbm-ecc-rise"]
    assert [(f.subject, f.category.value, f.severity.label) for f in rise] == [
        ("npu6", "device_fault", "critical")
    ]
    assert [a.name for step in rise[0].remediation for a in step] == ["reset_device", "restart"]
    assert "1 new uncorrectable" in rise[0].summary
    # the card's Health went Critical with it: the health rule fires too, on the same device
    assert {f.rule for f in found} == {"npu-smi-hbm-ecc-rise", "npu-smi-health-not-ok"}


async def test_the_daemon_stores_the_counters_and_the_finding(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host")
    config = Config(
        logs=LogsConfig(cann=False),
        collectors=CollectorsConfig(
            npu_smi=NpuSmiConfig(path=str(host.bin_dir / "npu-smi"), interval=0.1, ecc_interval=0.1)
        ),
    )
    daemon = Daemon(config, tmp_path / "state", None, load_rules(), base_env=dict(os.environ))
    run = asyncio.create_task(daemon.run())
    await wait_for(lambda: len(ecc_calls(host)) >= 8, what="a first ECC read", timeout=30)
    host.inject(1, "hbm_ecc")
    store = Store.in_dir(tmp_path / "state", readonly=True)
    try:

        def seen() -> bool:
            rules = {f.finding.rule for f in store.findings()}
            return {"npu-smi-hbm-ecc-rise", "npu-smi-health-not-ok"} <= rules

        await wait_for(seen, what="the rise's and the health's findings", timeout=30)
        latest = store.latest_samples("npu_smi")
        rules = {f.finding.rule for f in store.findings() if f.finding.subject == "npu1"}
        incidents = [i for i in store.incidents() if i.subject == "npu1"]
    finally:
        store.close()
        daemon.shutdown()
    assert await asyncio.wait_for(run, 10) == 0
    assert latest["npu1"]["hbm_ecc_double_bit_total"] >= 1
    # the card's Health (Critical) and its counters say the same: one incident of the device
    assert rules == {"npu-smi-hbm-ecc-rise", "npu-smi-health-not-ok"}
    assert len(incidents) == 1 and incidents[0].category.value == "device_fault"

    # a doctor started again on the same state dir knows the count its store kept
    daemon = Daemon(config, tmp_path / "state", None, load_rules(), base_env=dict(os.environ))
    run = asyncio.create_task(daemon.run())
    reads = len(ecc_calls(host))
    await wait_for(lambda: len(ecc_calls(host)) >= reads + 16, what="two ECC reads", timeout=30)
    daemon.shutdown()
    assert await asyncio.wait_for(run, 10) == 0
    store = Store.in_dir(tmp_path / "state", readonly=True)
    try:
        ecc = [f.finding.rule for f in store.findings() if "ecc" in f.finding.rule]
    finally:
        store.close()
    assert ecc == ["npu-smi-hbm-ecc-rise"]  # the first doctor's, and no report of the same
