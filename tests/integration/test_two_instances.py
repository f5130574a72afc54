"""Two simulated vLLM-Ascend instances behind a real nginx, under one doctor (issue 22): a
device fault on the first instance's card is fixed on that instance only while the second
serves every request; both crashing at once restart both; a planned stop of the second waits
while the first is being fixed, then drains it through nginx."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ascend_doctor.cli.balancer import Balancer, Load, nginx_binary
from ascend_doctor.cli.demo import free_port
from ascend_doctor.core.events import Outcome, ProcessState
from ascend_doctor.core.ha import server_dir
from ascend_doctor.core.store import Store
from ascend_doctor.sim.host import SimHost
from tests.conftest import poll, read_store

pytestmark = pytest.mark.integration

MODEL = "Qwen/Qwen2.5-7B-Instruct"
CONFIG = """
[server]
start_timeout = 60
backoff_initial = 0.2
backoff_max = 1.0
health_interval = 0.1
probe_interval = 0.5
stop_grace = 5
echo = false

[collectors.npu_smi]
interval = 1.0

[collectors.vllm]
interval = 0.5

[remediation]
settle_seconds = 1.0
reset_settle = 0.2
allow_device_reset = true
reset_scope = "chip"
"""


@dataclass
class Pair:
    """Two servers under one doctor, maybe behind an nginx."""

    tmp: Path
    host: SimHost
    ports: dict[str, int]
    lb: Balancer | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    def config(self, extra: str = "") -> str:
        text = CONFIG + extra
        if self.lb is not None:
            text += "\n[ha]\n"
            text += f"drain_command = {json.dumps(self.lb.drain_argv('down'))}\n"
            text += f"undrain_command = {json.dumps(self.lb.drain_argv('up'))}\n"
            text += "drain_wait = 0.5\n"
        for name, device in (("a", 0), ("b", 1)):
            argv = self.host.serve_argv(
                MODEL, ["--host", "127.0.0.1", "--port", str(self.ports[name])]
            )
            text += (
                f'\n[[servers]]\nname = "{name}"\ncommand = {json.dumps(argv)}\n'
                f'env = {{ ASCEND_RT_VISIBLE_DEVICES = "{device}" }}\n'
            )
        return text

    def start(self, extra: str = "") -> None:
        cfg = self.tmp / "doctor.toml"
        cfg.write_text(self.config(extra))
        cmd = [sys.executable, "-m", "ascend_doctor", "watch", "--config", str(cfg)]
        cmd += ["--state-dir", str(self.state)]
        with open(self.tmp / "doctor.out", "ab") as out:
            self.proc = subprocess.Popen(
                cmd, env={**os.environ, **self.host.env()}, stdout=out, stderr=subprocess.STDOUT
            )

    def read(self, name: str, fn: Any) -> Any:
        return read_store(server_dir(self.state, name), fn)

    def server(self, name: str) -> Any:
        return self.read(name, lambda s: s.server())

    def running(self, name: str) -> Any:
        m = self.server(name)
        return m if m is not None and m.state == ProcessState.RUNNING else None

    def events(self, name: str) -> list[Any]:
        return list(self.read(name, lambda s: s.process_events(limit=1000)) or [])

    def incident(self, name: str, category: str, state: str) -> Any:
        def find(s: Store) -> Any:
            return next(
                (
                    i
                    for i in s.incidents()
                    if i.category.value == category and i.state.value == state
                ),
                None,
            )

        return self.read(name, find)

    def actions(self, name: str, incident_id: int) -> list[Any]:
        return list(self.read(name, lambda s: s.actions(incident_id)) or [])

    def log(self) -> str:
        return (self.tmp / "doctor.out").read_text(errors="replace")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    host = SimHost.create(tmp_path / "host", load_seconds=0.3)
    host.set_setting("reset_scope", "chip")  # HCCS off: one chip per reset
    p = Pair(tmp_path, host, {"a": free_port(), "b": free_port()})
    try:
        yield p
    finally:
        if p.proc is not None and p.proc.poll() is None:
            p.proc.send_signal(signal.SIGTERM)
            try:
                p.proc.wait(60)
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait()
        if p.lb is not None:
            p.lb.stop()


def _nginx(p: Pair) -> Balancer:
    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx; .ci/run does)")
    lb = Balancer(p.tmp / "nginx", free_port(), binary)
    lb.start([(n, f"127.0.0.1:{port}") for n, port in p.ports.items()])
    p.lb = lb
    poll(lb.ready, 20, "nginx to listen")
    return lb


def _names(actions: list[Any]) -> list[str]:
    return [a.name for a in actions]


def test_device_fault_on_one_instance_is_fixed_while_the_other_serves_every_request(
    pair: Pair,
) -> None:
    lb = _nginx(pair)
    pair.start()
    b_first = poll(lambda: pair.running("b"), 60, "server b to run")
    poll(lambda: pair.running("a"), 60, "server a to run")
    load = Load(lb.url, MODEL)
    load.start()
    try:
        poll(lambda: load.ok >= 20, 60, "traffic through nginx")
        pair.host.inject(0, "heartbeat_lost")
        inc = poll(
            lambda: pair.incident("a", "device_fault", "resolved"), 90, "a's fault to be fixed"
        )
        seen = load.sent
        poll(lambda: load.sent >= seen + 20, 60, "traffic after the fix")
        undrained = poll(
            lambda: [a for a in pair.actions("a", inc.id) if a.name == "undrain"],
            30,
            "a back in nginx",
        )
    finally:
        load.stop()
    assert load.failed == 0, load.failures
    steps = pair.actions("a", inc.id)
    names = _names(steps)
    assert names.index("reset_device") < names.index("restart") < names.index("verify"), names
    reset = next(a for a in steps if a.name == "reset_device")
    assert reset.outcome == Outcome.OK and reset.params["scope"] == [0], reset
    assert undrained[0].outcome == Outcome.OK, undrained
    # the hardware saw one reset, of card 0 only
    resets = json.loads(pair.host.state_path.read_text())["resets"]
    assert [r["devices"] for r in resets] == [[0]]
    # b was never stopped: one start, the same pid, no incident of its own
    b_events = pair.events("b")
    assert [e.state for e in b_events if e.state != ProcessState.RUNNING] == [
        ProcessState.STARTING
    ], b_events
    assert pair.running("b").pid == b_first.pid
    assert pair.read("b", lambda s: s.incidents()) == []
    # a's fault is a's: its subject and its alert name it, and nginx saw no request fail
    assert "down" not in lb.servers_file.read_text()


def test_both_instances_crashing_at_once_are_both_restarted(pair: Pair) -> None:
    pair.start()
    first = {n: poll(lambda n=n: pair.running(n), 60, f"server {n} to run") for n in "ab"}
    for m in first.values():
        os.kill(m.pid, signal.SIGKILL)
    again = {
        n: poll(
            lambda n=n: (m := pair.running(n)) and m.pid != first[n].pid and m,
            60,
            f"server {n} to run again",
        )
        for n in "ab"
    }
    assert set(again) == {"a", "b"}
    for n in "ab":
        # a dead server has nothing left to protect: no gate decision held it back
        waits = pair.read(n, lambda s: [a for i in s.incidents() for a in s.actions(i.id)])
        assert not [a for a in waits or [] if a.name == "ha_wait"], waits


def test_a_planned_stop_of_the_healthy_instance_waits_for_the_other_to_be_healthy(
    pair: Pair,
) -> None:
    lb = _nginx(pair)
    rules = pair.tmp / "rules"
    rules.mkdir()
    demo_timing = Path(__file__).parents[2] / "sim" / "rules" / "demo-timing.yaml"
    (rules / "fast-hang.yaml").write_text(demo_timing.read_text())
    pair.host.set_setting("reset_seconds", 10.0)  # a's fix takes a while
    pair.start(f'\n[rules]\ndirs = ["{rules}"]\n')
    poll(lambda: pair.running("a"), 60, "server a to run")
    poll(lambda: pair.running("b"), 60, "server b to run")
    pair.host.inject(0, "heartbeat_lost")
    poll(lambda: not pair.running("a"), 30, "server a to go down")
    # while a is being fixed, b's engine hangs on its next request, /health still 200
    pair.host.set_quirk("hang", "once")
    with pytest.raises(httpx.HTTPError):
        httpx.post(
            f"http://127.0.0.1:{pair.ports['b']}/v1/completions",
            json={"model": MODEL, "prompt": "hi", "max_tokens": 4},
            timeout=0.5,
            trust_env=False,
        )
    inc = poll(lambda: pair.incident("b", "server_hang", "resolved"), 120, "b's hang fixed")
    steps = pair.actions("b", inc.id)
    names = _names(steps)
    assert names.index("ha_wait") < names.index("ha_stop") < names.index("drain"), names
    wait = next(a for a in steps if a.name == "ha_wait")
    assert wait.outcome == Outcome.REFUSED and "0 of the other servers healthy" in wait.reason
    drain = next(a for a in steps if a.name == "drain")
    assert drain.outcome == Outcome.OK, drain
    poll(lambda: "undrain" in _names(pair.actions("b", inc.id)), 30, "b back in nginx")
    # b stopped only after a was running again
    a_back = max(e.at for e in pair.events("a") if e.state == ProcessState.RUNNING)
    b_stop = [e.at for e in pair.events("b") if e.state == ProcessState.STOPPING]
    assert b_stop and min(b_stop) >= a_back, (a_back, b_stop)
    # and only once a was back in nginx: never both out of it
    a_inc = pair.incident("a", "device_fault", "resolved")
    a_undrain = [a.at for a in pair.actions("a", a_inc.id) if a.name == "undrain"]
    assert a_undrain and a_undrain[0] <= drain.at, (a_undrain, drain.at)
    assert "down" not in lb.servers_file.read_text()
    # what an operator reads: each server, or one
    listed = _cli("incidents", "--state-dir", str(pair.state))
    assert "[a] #1 resolved" in listed.stdout and "[b] #1 resolved" in listed.stdout
    assert "server b" in listed.stdout  # the hang's subject names its server
    one = _cli("incidents", "--state-dir", str(pair.state), "--server", "b", "--json")
    assert [json.loads(r)["category"] for r in one.stdout.splitlines()] == ["server_hang"]
    shown = _cli("incidents", "--state-dir", str(pair.state), "--server", "b", "show", "1")
    assert "ha_wait" in shown.stdout and shown.returncode == 0
    status = _cli("status", "--state-dir", str(pair.state), "--json")
    assert set(json.loads(status.stdout)["servers"]) == {"a", "b"}, status.stdout
    assert "== server a ==" in _cli("status", "--state-dir", str(pair.state)).stdout


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ascend_doctor", *args], capture_output=True, text=True, timeout=60
    )


def test_demo_two_instance_tour_counts_no_failed_request(tmp_path: Path) -> None:
    if nginx_binary() is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx; .ci/run does)")
    state = str(tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-m", "ascend_doctor", "demo", "--two-instances", "--state-dir", state],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "server b: never stopped" in done.stdout
    assert ", 0 failed" in done.stdout
    assert (tmp_path / "state" / "servers" / "a" / "doctor.db").exists()
