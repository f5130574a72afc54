"""``ascend-doctor demo``: the one place that imports ``sim/``.

It builds a simulated Ascend host, then runs the ordinary watch code (the same
Daemon) against it, scenario by scenario, and prints what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from ascend_doctor.agent.daemon import Daemon
from ascend_doctor.cli.common import setup_logging, usable_state_dir
from ascend_doctor.cli.views import incident_dicts, plural
from ascend_doctor.core.config import Config
from ascend_doctor.core.errors import ConfigError
from ascend_doctor.core.events import IncidentState
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.core.store import Store
from ascend_doctor.rules import load_rules
from ascend_doctor.sim.driver import drive, prepare
from ascend_doctor.sim.host import SimHost
from ascend_doctor.sim.scenarios import Scenario, list_scenarios, load_scenario
from ascend_doctor.tui.data import DEMO_DONE

SCENARIO_DEADLINE = 45.0  # seconds one scenario may take before it counts as not recovered
TOUR = (
    "kv-cache",
    "npu-oom",
    "device-fault",
    "graph-capture",
    "hang",
    "stuck-idle",
    "garbled-output",
    "memory-creep",
    "slow-decode",
    "device-busy",
    "crash-loop",
)
"""The order of the tour: the fixes first, then what only a human can fix."""


def scenario_list() -> list[tuple[str, str]]:
    """(name, description) of every scenario."""
    return [(n, load_scenario(n).description) for n in list_scenarios()]


def demo_config() -> Config:
    """Defaults tuned for a simulated host: short waits, device resets allowed."""
    base = Config()
    return dataclasses.replace(
        base,
        server=dataclasses.replace(
            base.server,
            start_timeout=60.0,
            backoff_initial=0.5,
            backoff_max=5.0,
            probe_interval=1.0,
            stop_grace=5.0,
        ),
        remediation=dataclasses.replace(
            base.remediation,
            # seven deployments in a minute on one host: the real budget (6 an hour) would
            # rightly stop the tour half-way
            budget_per_hour=30,
            allow_device_reset=True,
            reset_settle=1.0,
            settle_seconds=3.0,
            command_timeout=30.0,
            # a planned restart looks for a quiet moment every second, over a minute's history
            quiet_retry=1.0,
            quiet_window=60.0,
        ),
        collectors=dataclasses.replace(
            base.collectors,
            # memory creep is seen over ten seconds of samples, not an hour
            npu_smi=dataclasses.replace(
                base.collectors.npu_smi, interval=1.0, timeout=5.0, trend_window=10.0
            ),
            # the latency baseline is the first healthy seconds, not the first hour
            vllm=dataclasses.replace(base.collectors.vllm, interval=1.0, baseline_seconds=4.0),
            process=dataclasses.replace(base.collectors.process, interval=1.0),
            # a canary a second, answered within two: a stuck server is seen in seconds
            canary=dataclasses.replace(base.collectors.canary, interval=1.0, timeout=2.0),
        ),
        rules=dataclasses.replace(base.rules, dirs=(*base.rules.dirs, str(_demo_rules()))),
        # the slow-decode scenario's capture_profile; the advisor would take most of the tour
        profiling=dataclasses.replace(
            base.profiling, enabled=True, capture_seconds=2.0, advisor=False
        ),
    )


def _demo_rules() -> Path:
    """The demo's site rules (a hang is declared after seconds, not a minute)."""
    from ascend_doctor.sim import scenarios

    return Path(scenarios.__file__).resolve().parent / "rules"


def _sim_paths(config: Config, host: SimHost) -> Config:
    """The demo overrides only the simulator's paths (and keeps the terminal for the timeline)."""
    return dataclasses.replace(
        config,
        server=dataclasses.replace(config.server, echo=False, health_url=""),
        collectors=dataclasses.replace(
            config.collectors,
            npu_smi=dataclasses.replace(
                config.collectors.npu_smi, path=str(host.bin_dir / "npu-smi")
            ),
        ),
        # the host's /var/log/messages: where the NPU driver reports a lost heartbeat
        logs=dataclasses.replace(config.logs, paths=(*config.logs.paths, str(host.kernel_log))),
    )


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_demo(
    names: list[str],
    state_dir: Path | None,
    config: Config | None,
    *,
    verbose: bool = False,
    sim_version: str | None = None,
) -> bool:
    """Run scenarios; True when every one ended as its scenario expects."""
    known = list_scenarios()
    for name in names:
        if name not in known:
            raise ConfigError(f"unknown scenario {name!r}; known: {', '.join(known)}")
    names = names or sorted(known, key=lambda n: (TOUR.index(n) if n in TOUR else len(TOUR), n))
    if state_dir is None:  # one temp dir holds the state and the host, and is named below
        state_dir = Path(tempfile.mkdtemp(prefix="ascend-doctor-demo-")) / "state"
    state_dir = usable_state_dir(state_dir)
    # the simulated host lives in the state dir: nothing is left behind anywhere else, and
    # the paths the store records (the server's PATH, its log root) stay valid afterwards
    (state_dir / DEMO_DONE).unlink(missing_ok=True)  # the TUI's header: a tour is running
    host_dir = state_dir / "simhost"
    shutil.rmtree(host_dir, ignore_errors=True)  # a fresh host for every run
    setup_logging(verbose, None if verbose else state_dir / "doctor.log")
    try:
        host = SimHost.create(host_dir, vllm_version=sim_version)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    base = _sim_paths(config or demo_config(), host)
    v = host.version
    click.echo(f"simulated Atlas 800T A2 (8 x 910B3) in {host.root}")
    click.echo(
        f"serving stack: vLLM {v.vllm}, vLLM-Ascend {v.vllm_ascend}, torch_npu {v.torch_npu}, "
        f"CANN {v.cann}"
    )
    click.echo(f"state dir: {state_dir}\n")
    results: list[tuple[str, bool]] = []
    t0 = time.monotonic()
    try:
        for name in names:
            scenario = load_scenario(name)
            # the scenario records its result itself, before it prints it: a Ctrl-C during
            # the loop's teardown after "result:" must not lose a scenario the user saw end
            asyncio.run(_run_scenario(scenario, host, base, state_dir, results))
    except KeyboardInterrupt:
        # Ctrl-C: what ran so far, and where it is recorded, instead of a traceback
        click.echo(f"\ninterrupted after {len(results)} of {plural(len(names), 'scenario')}")
        _summary(results, t0, state_dir)
        raise DemoInterrupted() from None
    _summary(results, t0, state_dir)
    return all(ok for _, ok in results) and len(results) == len(names)


class DemoInterrupted(Exception):
    """Ctrl-C during the demo: the partial summary is printed."""


def _summary(results: list[tuple[str, bool]], t0: float, state_dir: Path) -> None:
    good = sum(ok for _, ok in results)
    with contextlib.suppress(OSError):
        (state_dir / DEMO_DONE).write_text(
            f"demo tour finished: {good} of {plural(len(results), 'scenario')} as expected\n"
        )
    click.echo(f"\ntour took {time.monotonic() - t0:.1f}s")
    for name, ok in results:
        want = load_scenario(name).expected_state
        shown = {"resolved": "recovered", "escalated": "escalated to a human"}[want]
        click.echo(f"  {name:14} {shown if ok else 'NOT AS EXPECTED (wanted ' + shown + ')'}")
    click.echo(f"\nstate dir: {state_dir}")
    click.echo(f"see: ascend-doctor incidents --state-dir {state_dir}")


async def _run_scenario(
    scenario: Scenario,
    host: SimHost,
    config: Config,
    state_dir: Path,
    results: list[tuple[str, bool]],
) -> bool:
    click.echo(f"== {scenario.name}: {scenario.description}")
    store = Store.in_dir(state_dir)
    store.clear_overrides()  # each scenario is a different deployment
    first_incident = max((i.id for i in store.incidents()), default=0)
    store.close()
    port = free_port()
    argv = host.serve_argv(
        scenario.model, ["--host", "127.0.0.1", "--port", str(port), *scenario.flags]
    )
    spec = LaunchSpec(tuple(argv), {**host.env(), **scenario.env})
    daemon = Daemon(config, state_dir, spec, load_rules([Path(d) for d in config.rules.dirs]))
    cleanup = prepare(scenario, host)
    started = time.time()
    run = asyncio.create_task(daemon.run())
    driver = asyncio.create_task(drive(scenario, host, f"http://127.0.0.1:{port}"))
    expected = scenario.expect["category"]
    outcome = None
    deadline = time.monotonic() + SCENARIO_DEADLINE
    reader = Store.in_dir(state_dir, readonly=True)
    try:
        while time.monotonic() < deadline and not run.done():
            mine = [i for i in reader.incidents() if i.id > first_incident]
            done = [
                i
                for i in mine
                if i.category.value == expected
                and i.state in (IncidentState.RESOLVED, IncidentState.ESCALATED)
            ]
            if done:
                outcome = done[0].state
                break
            await asyncio.sleep(0.2)
        _timeline(reader, first_incident, started)
    finally:
        reader.close()
        daemon.shutdown()
        await run
        driver.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await driver
        cleanup()
    ok = outcome is not None and outcome.value == scenario.expected_state
    if outcome == IncidentState.RESOLVED:
        result = "recovered"
    elif outcome == IncidentState.ESCALATED:
        result = "escalated to a human" + (" (as it should)" if ok else "")
    else:
        result = f"no outcome within {SCENARIO_DEADLINE:.0f}s"
    results.append((scenario.name, ok))
    click.echo(f"   result: {result}{'' if ok else ' (NOT AS EXPECTED)'}\n")
    return ok


def _timeline(store: Store, first_incident: int, started: float) -> None:
    events: list[tuple[float, str]] = []
    for e in store.process_events(limit=200):
        shown = ("STARTING", "RUNNING", "EXITED", "STOPPED", "FATAL")
        if e.at >= started and e.state.value in shown:
            events.append((e.at, f"server    {e.state.value:8} {e.reason}"))
    for inc in incident_dicts(store):
        if inc["id"] <= first_incident:
            continue
        events.append(
            (
                inc["opened_at"],
                f"detected  {inc['category']} (incident {inc['id']},"
                f" rule {inc['rule']}): {inc['summary']}",
            )
        )
        for a in inc["actions"]:
            events.append(
                (
                    a["at"],
                    f"action    {a['name']} {a['outcome']}: {a['reason']}"
                    + _params(a["name"], a["params"]),
                )
            )
        if inc["resolved_at"]:
            events.append((inc["resolved_at"], f"{inc['state']:9} incident {inc['id']}"))
    for at, text in sorted(events, key=lambda e: e[0]):
        click.echo(f"   +{at - started:5.1f}s  {text}")


FLAGS = {
    "lower_max_model_len": "--max-model-len",
    "lower_gpu_memory_utilization": "--gpu-memory-utilization",
    "lower_max_num_seqs": "--max-num-seqs",
}
"""The flag a from/to action changes, to print it as the operator would write it."""


def _params(name: str, params: dict[str, Any]) -> str:
    """What an action changed, as an operator writes it: ``--max-model-len 32768 → 16128``,
    ``+ --enforce-eager``, ``PYTORCH_NPU_ALLOC_CONF=expandable_segments:True``, ``NPU 3``."""
    parts: list[str] = []
    if "to" in params and "from" in params:
        what = params.get("name") or FLAGS.get(name, name)
        sep = "=" if str(what).isupper() else " "
        parts.append(f"{what}{sep}{params['from']} → {params['to']}")
    elif "name" in params and "value" in params:
        parts.append(f"{params['name']}={params['value']}")
    if "flag" in params:
        parts.append(f"+ {params['flag']}")
    for key, value in dict(params.get("args") or {}).items():
        parts.append(f"+ {key}" if value in ("", None) else f"{key} {value}")
    for key, value in dict(params.get("env") or {}).items():
        parts.append(f"{key}={value}")
    if "device" in params:
        parts.append(f"NPU {params['device']}")
    return "  (" + ", ".join(parts) + ")" if parts else ""


__all__ = ["DemoInterrupted", "demo_config", "free_port", "run_demo", "scenario_list"]
