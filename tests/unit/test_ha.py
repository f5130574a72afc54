"""Several servers under one doctor: the [[servers]] and [ha] config, who may stop (core/ha.py),
the gate that waits, drains and undrains (agent/fleet.py), attribution of shared CANN logs, and
the nginx drain tool's rewrite (cli/nginx_drain.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from ascend_doctor.agent.fleet import HAGate, Member, StopRefused, log_owner
from ascend_doctor.cli.nginx_drain import main as drain_main
from ascend_doctor.cli.nginx_drain import rewrite
from ascend_doctor.core.config_file import load_config
from ascend_doctor.core.errors import ConfigError
from ascend_doctor.core.events import (
    Category,
    Finding,
    Outcome,
    ProcessState,
    Role,
    Sample,
    Severity,
)
from ascend_doctor.core.ha import HAConfig, may_stop, required_healthy, substitute

SERVER = """
[[servers]]
name = "{name}"
command = ["vllm", "serve", "m", "--port", "{port}"]
env = {{ ASCEND_RT_VISIBLE_DEVICES = "{dev}" }}
"""


def _cfg(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "doctor.toml"
    p.write_text(text)
    return p


def test_servers_tables_load_with_their_env_and_default_url(tmp_path: Path) -> None:
    text = SERVER.format(name="a", port=8001, dev="0,1") + SERVER.format(name="b", port=8002, dev=2)
    config = load_config(_cfg(tmp_path, text))
    assert [s.name for s in config.servers] == ["a", "b"]
    assert config.servers[0].env == {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}
    assert config.servers[1].command[-1] == "8002" and config.servers[1].url == ""
    assert required_healthy(config.ha, len(config.servers)) == 1
    assert required_healthy(config.ha, 1) == 0


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (SERVER.format(name="a", port=1, dev=0) * 2, "the name 'a' is used twice"),
        (SERVER.format(name="../x", port=1, dev=0), "has name '../x'"),
        ('[[servers]]\nname = "a"\n', "has no command"),
        ('[[servers]]\nname = "a"\ncommand = ["v"]\nenv = { X = 1 }\n', "doctor.toml:4"),
        (
            "[ha]\nmin_healthy = 2\n"
            + SERVER.format(name="a", port=1, dev=0)
            + SERVER.format(name="b", port=2, dev=1),
            "'ha.min_healthy' is 2: expected at most 1",
        ),
        ('[ha]\ndrain_command = "nginx -s reload"\n', "expected a list of strings"),
    ],
)
def test_bad_servers_or_ha_config_stops_start_up_naming_it(
    tmp_path: Path, text: str, said: str
) -> None:
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        load_config(_cfg(tmp_path, text))


def test_may_stop_needs_healthy_others_not_held_by_their_own_stop() -> None:
    assert may_stop("a", {"a": True, "b": True}, [], 1).allowed
    no = may_stop("a", {"a": True, "b": False}, [], 1)
    assert not no.allowed and "0 of the other servers healthy, 1 needed" in no.reason
    held = may_stop("a", {"a": True, "b": True}, ["b"], 1)
    assert not held.allowed and "b not healthy again yet" in held.reason
    assert may_stop("a", {"a": True}, [], 0).allowed  # one server: nothing to protect


def test_substitute_replaces_only_name_and_url() -> None:
    argv = ["drain", "{name}", "--url={url}", "{other}", "{name}{name}"]
    assert substitute(argv, "a", "http://x:1") == [
        "drain",
        "a",
        "--url=http://x:1",
        "{other}",
        "aa",
    ]


def test_log_owner_reads_pid_and_card_from_cann_file_names() -> None:
    assert log_owner("/l/debug/plog/plog-4242_20261203.log") == (4242, None)
    assert log_owner("/l/debug/device-3/device-77_2026.log") == (77, 3)
    assert log_owner("/state/servers/a/server.log") == (None, None)


def _finding(path: str) -> Finding:
    return Finding(
        rule="r",
        category=Category.DEVICE_FAULT,
        severity=Severity.CRITICAL,
        role=Role.ROOT,
        subject="server",
        summary="s",
        at=0.0,
        path=path,
    )


def test_a_shared_log_is_attributed_by_pid_then_card_and_unclaimed_ones_are_kept() -> None:
    a = Member("a", "http://a", [0], ours=lambda pid: pid == 10)
    b = Member("b", "http://b", [1], ours=lambda pid: pid == 20)
    gate = HAGate(HAConfig())
    gate.add(a)
    gate.add(b)
    assert a.owns(_finding("/l/plog/plog-10_1.log"))
    assert not a.owns(_finding("/l/plog/plog-20_1.log"))
    assert a.owns(_finding("/l/plog/plog-30_1.log"))  # nobody's: a duplicate, not a loss
    assert not a.owns(_finding("/l/device-1/device-30_1.log"))
    assert b.owns(_finding("/l/device-1/device-30_1.log"))
    assert a.keeps(Sample("npu_smi", "npu0", 0.0)) and not a.keeps(Sample("npu_smi", "npu1", 0.0))
    assert a.keeps(Sample("vllm", "server", 0.0))


class FakeHandle:
    """What the gate reads of a server."""

    def __init__(self) -> None:
        self.state = ProcessState.RUNNING
        self.healthy = True


class Gate:
    """A gate over two members with recorded decisions and fake commands."""

    def __init__(self, ha: HAConfig, rc: int = 0) -> None:
        self.ran: list[list[str]] = []
        self.decisions: list[tuple[str, str, Outcome, str]] = []
        self.rc = rc
        self.now = 0.0
        self.gate = HAGate(
            ha, run=self._run, probe=self._probe, clock=lambda: self.now, recheck=0.01
        )
        self.handles: dict[str, FakeHandle] = {}
        for name in "ab":
            m = Member(name, f"http://{name}", [])
            h = FakeHandle()
            m.handle = h  # type: ignore[assignment]
            m.serving = True
            m.decide = lambda n, o, r, p, name=name: self.decisions.append((name, n, o, r))
            self.gate.add(m)
            self.handles[name] = h

    async def _run(self, argv: Sequence[str], timeout: float) -> tuple[int | None, str]:
        self.ran.append(list(argv))
        return self.rc, "said"

    async def _probe(self, url: str, timeout: float) -> tuple[bool, str]:
        return True, "1-token completion"

    def names(self) -> list[str]:
        return [f"{who}:{name}:{outcome.value}" for who, name, outcome, _ in self.decisions]


HA = HAConfig(drain_command=("drain", "{name}", "{url}"), undrain_command=("undrain", "{name}"))


async def test_stop_with_the_other_healthy_drains_then_passes() -> None:
    g = Gate(HA)
    await g.gate.before_stop("a", "restart for a step")
    assert g.ran == [["drain", "a", "http://a"]]
    assert g.names() == ["a:ha_stop:ok", "a:drain:ok"]
    assert g.gate.held == {"a"}
    # b may not stop now: a counts as down until it answered again
    with pytest.raises(StopRefused):
        await _refuse_fast(g, "b")
    await g.gate.after_start("a")
    assert g.ran[-1] == ["undrain", "a"] and g.gate.held == set()
    await g.gate.before_stop("b", "restart")
    assert g.gate.held == {"b"}


async def _refuse_fast(g: Gate, name: str) -> None:
    g.gate.ha = HAConfig(max_wait=0.0, drain_command=HA.drain_command)
    try:
        await g.gate.before_stop(name, "restart")
    finally:
        g.gate.ha = HA


async def test_stop_waits_while_the_other_is_down_then_goes_once_it_serves() -> None:
    g = Gate(HA)
    g.handles["b"].healthy = False
    g.gate.changed("b", running=False)
    waiting = asyncio.create_task(g.gate.before_stop("a", "reset device 0"))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    assert g.names() == ["a:ha_wait:refused"]
    assert "0 of the other servers healthy, 1 needed" in g.decisions[0][3]
    g.handles["b"].healthy = True
    g.gate.changed()
    await asyncio.sleep(0.05)
    assert not waiting.done()  # running and /health 200 is not enough: it must answer first
    await g.gate.after_start("b")
    await asyncio.wait_for(waiting, 1.0)
    assert g.names()[-2:] == ["a:ha_stop:ok", "a:drain:ok"]


async def test_stop_waits_at_most_max_wait_then_is_refused() -> None:
    g = Gate(HAConfig(max_wait=5.0))
    g.handles["b"].healthy = False
    waiting = asyncio.create_task(g.gate.before_stop("a", "restart"))
    await asyncio.sleep(0.03)
    g.now = 6.0
    with pytest.raises(StopRefused, match="no stop after 5s of waiting"):
        await asyncio.wait_for(waiting, 1.0)
    assert g.gate.held == set()


async def test_a_failing_drain_refuses_the_stop_unless_not_required() -> None:
    g = Gate(HA, rc=3)
    with pytest.raises(StopRefused, match="drain drain a http://a failed"):
        await g.gate.before_stop("a", "restart")
    assert g.names() == ["a:ha_stop:ok", "a:drain:refused"] and g.gate.held == set()
    g = Gate(HAConfig(drain_command=("drain",), drain_required=False), rc=3)
    await g.gate.before_stop("a", "restart")
    assert g.names() == ["a:ha_stop:ok", "a:drain:failed"]
    assert "ha.drain_required = false" in g.decisions[-1][3]


async def test_a_failed_undrain_leaves_the_server_out_and_the_others_waiting() -> None:
    g = Gate(HA)
    await g.gate.before_stop("a", "restart")
    g.rc = 1
    await g.gate.after_start("a")
    assert g.names()[-1] == "a:undrain:failed"
    assert g.gate.held == {"a"} and not g.gate.members["a"].serving


def test_rewrite_marks_one_server_down_and_back(tmp_path: Path) -> None:
    text = (
        "# header\n"
        "server 127.0.0.1:8001 max_fails=1 fail_timeout=10s; # a\n"
        "server 127.0.0.1:8002 max_fails=1; # b\n"
    )
    down = rewrite(text, "a", True)
    assert "server 127.0.0.1:8001 max_fails=1 fail_timeout=10s down; # a\n" in down
    assert rewrite(down, "a", True) == down  # twice is once
    assert rewrite(down, "a", False) == text
    with pytest.raises(ValueError, match=r"no 'server \.\.\.; # c' line"):
        rewrite(text, "c", True)


def test_drain_tool_puts_the_file_back_when_nginx_refuses(tmp_path: Path) -> None:
    servers = tmp_path / "servers.conf"
    servers.write_text("server 127.0.0.1:1; # a\n")
    assert drain_main(["down", "a", "--servers", str(servers), "--", "false"]) == 1
    assert servers.read_text() == "server 127.0.0.1:1; # a\n"
    assert drain_main(["down", "a", "--servers", str(servers), "--", "true"]) == 0
    assert servers.read_text() == "server 127.0.0.1:1 down; # a\n"


def test_each_servers_telemetry_resource_names_it(tmp_path: Path) -> None:
    from ascend_doctor.agent.telemetry.resource import SERVER_KEY, build_resource
    from ascend_doctor.core.store import Store

    store = Store.in_dir(tmp_path)
    try:
        assert build_resource(store, (), "a").attributes[SERVER_KEY] == "a"
        assert SERVER_KEY not in build_resource(store).attributes  # one server: as before
    finally:
        store.close()


def test_each_servers_alerts_name_their_server(tmp_path: Path) -> None:
    from ascend_doctor.agent.fleet_run import Fleet
    from ascend_doctor.rules import load_rules

    text = (
        '[alerts]\nhost = "atlas-7"\n'
        + SERVER.format(name="a", port=8001, dev=0)
        + SERVER.format(name="b", port=8002, dev=1)
    )
    config = load_config(_cfg(tmp_path, text))
    fleet = Fleet(config, tmp_path / "state", load_rules(), base_env={})
    try:
        hosts = [d.config.alerts.host for d in fleet.daemons]
        assert hosts == ["atlas-7/a", "atlas-7/b"]  # a page says which instance it is about
    finally:
        for d in fleet.daemons:
            d.shutdown()
