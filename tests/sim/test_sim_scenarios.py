"""Scenario files and the driver that plays them against the fake server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from simhost_support import ServerRun, free_port

from ascend_doctor.sim.driver import drive
from ascend_doctor.sim.host import SimHost
from ascend_doctor.sim.scenarios import list_scenarios, load_scenario, parse_scenario


def test_shipped_scenarios_load() -> None:
    assert list_scenarios() == [
        "crash-loop",
        "device-busy",
        "device-fault",
        "garbled-output",
        "graph-capture",
        "hang",
        "kv-cache",
        "memory-creep",
        "npu-oom",
        "slow-decode",
        "stuck-idle",
    ]
    kv = load_scenario("kv-cache")
    assert kv.flags == ("--max-model-len", "32768", "--gpu-memory-utilization", "0.5")
    assert kv.expect == {"category": "kv_cache_insufficient", "action": "lower_max_model_len"}
    fault = load_scenario("device-fault")
    assert fault.env["ASCEND_RT_VISIBLE_DEVICES"] == "3"
    assert (fault.stimulus.inject_device, fault.stimulus.inject_fault) == (3, "heartbeat_lost")
    assert load_scenario("npu-oom").expect["action"] == "restart"
    assert kv.expected_state == "resolved"
    busy = load_scenario("device-busy")
    assert busy.expected_state == "escalated"
    assert [(h.device, h.name) for h in busy.host.holders] == [(6, "python3")]
    assert load_scenario("crash-loop").host.quirks == {"aicore": "always"}
    slow = load_scenario("slow-decode").stimulus
    assert slow.traffic_seconds > slow.slow_after_seconds > 0
    assert slow.slow == {"rank": 1, "part": "collective", "factor": 8}
    assert fault.host.settings == {"driver_hang_seconds": 1.0}


def test_invalid_host_setup_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    head = "name: bad\ndescription: x\nmodel: m\nexpect: {category: c, action: a}\n"
    bad.write_text(head + "host: {quirks: {hang: always}}\n")
    with pytest.raises(ValueError, match=r"key 'host.quirks.hang': unknown quirk value"):
        parse_scenario(bad)
    bad.write_text(head + "host: {holders: [{device: 1}]}\n")
    with pytest.raises(ValueError, match=r"key 'host.holders\[0\]'"):
        parse_scenario(bad)
    bad.write_text(head + "host: {settings: {reset_seconds: 1}}\n")
    with pytest.raises(ValueError, match=r"key 'host.settings': expected some of"):
        parse_scenario(bad)
    bad.write_text(head + "host: {settings: {driver_hang_seconds: -1}}\n")
    with pytest.raises(ValueError, match=r"key 'host.settings.driver_hang_seconds'"):
        parse_scenario(bad)
    bad.write_text(head.replace("action: a", "action: a, state: fixed"))
    with pytest.raises(ValueError, match=r"key 'expect.state'"):
        parse_scenario(bad)


def test_host_settings_and_version(host: SimHost, tmp_path: Path) -> None:
    assert host.version.line == "0.11"
    host.set_setting("driver_hang_seconds", 2.5)
    assert host.setting("driver_hang_seconds") == 2.5
    with pytest.raises(ValueError, match="unknown host setting"):
        host.set_setting("voltage", 1)
    with pytest.raises(ValueError, match="reset_scope must be board or chip"):
        host.set_setting("reset_scope", "rack")
    newest = SimHost.create(tmp_path / "new", vllm_version="0.23.0")
    assert newest.version.vllm == "0.23.0"
    with pytest.raises(ValueError, match=r"known lines: 0.11, 0.13, 0.18, 0.23"):
        SimHost.create(tmp_path / "old", vllm_version="0.9")


def test_quirk_values_are_checked(host: SimHost) -> None:
    host.set_quirk("graph_capture", "fail")
    with pytest.raises(ValueError, match="unknown quirk"):
        host.set_quirk("graph_capture", "sometimes")
    host.set_quirk("graph_capture", None)


def test_unknown_and_invalid_scenarios(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="kv-cache"):
        load_scenario("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndescription: x\nmodel: m\nflags: [1]\nexpect: {}\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: key 'flags'"):
        parse_scenario(bad)
    bad.write_text("name: bad\ndescription: x\nmodel: m\nexpect: {category: c}\n")
    with pytest.raises(ValueError, match=r"key 'expect': missing \['action'\]"):
        parse_scenario(bad)


async def test_driver_plays_device_fault(serve: Callable[..., ServerRun], host: SimHost) -> None:
    scenario = load_scenario("device-fault")
    run = serve(scenario.model, list(scenario.flags), dict(scenario.env))
    await drive(scenario, host, run.base, deadline_s=10.0)
    assert host.device(3)["fault"] == "heartbeat_lost"
    rc = await asyncio.to_thread(run.wait)
    assert rc == 0
    assert "error code is 507010" in run.output()


async def test_driver_gives_up_at_the_deadline(host: SimHost) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TimeoutError):
        await drive(load_scenario("npu-oom"), host, url, deadline_s=0.3)
