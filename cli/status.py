"""``ascend-doctor status``: the first command at 3 a.m., so it tells the truth. Is the doctor
running (a stored pid that is gone is "not running", and what follows is its last record),
what state is the server really in, which incidents wait for a human and how to acknowledge
them, what budget is left. Its exit status is for scripts:

- 0: the doctor runs, the server runs (or nothing is supervised), nothing waits for a human;
- 1: something needs a human: an incident escalated and not acknowledged, or the server is
  not running;
- 2: no store there, or one that cannot be read;
- 3: the doctor is not running (its records are the last it wrote).
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from ascend_doctor.agent.remediation.policy import Policy
from ascend_doctor.cli.common import (
    InputError,
    open_store,
    resolve_state_dir,
    server_dirs,
    server_option,
    state_dir_option,
)
from ascend_doctor.cli.views import plural, when
from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.events import ACTIVE_STATES, IncidentState, ProcessState
from ascend_doctor.core.ha import server_dir
from ascend_doctor.core.incident_stats import category_stats
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.core.procs import same_process
from ascend_doctor.core.records import LaunchRecord, encode
from ascend_doctor.core.store import Store

OK, ATTENTION, DOCTOR_DOWN = 0, 1, 3
# environment a status line does not need to repeat in full: the shell's own search paths
LONG_ENV = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH")


def _span(seconds: float) -> str:
    """``42s``, ``12.5 min``, ``3.2 h``: a duration as an operator reads it."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def status_dict(store: Store) -> dict[str, Any]:
    """What ``status --json`` prints."""
    launch = store.launch() or LaunchRecord(())
    overrides = store.overrides()
    effective = LaunchSpec(launch.argv, dict(launch.env)).apply(overrides)
    doctor = store.doctor()
    server = store.server()
    remediation = doctor.remediation if doctor is not None else RemediationConfig()
    collectors = store.collectors()
    alive = doctor is not None and same_process(doctor.pid, doctor.proc_start)
    # the last moment the store shows the doctor at work: its start, a server change, a run
    seen = [doctor.started_at] if doctor is not None else []
    seen += [server.since] if server is not None else []
    seen += [c.last_ok_at for c in collectors.values() if c.last_ok_at is not None]
    server_alive = server is not None and (
        server.pid is None or same_process(server.pid, server.proc_start)
    )
    waiting = [i for i in store.incidents(states=(IncidentState.ESCALATED,)) if not i.acknowledged]
    return {
        "doctor_running": alive,
        "doctor_last_seen": max(seen) if seen else None,
        "server": encode(server) if server is not None else None,
        "server_process_alive": server_alive,
        "doctor": encode(doctor) if doctor is not None else {},
        "remediation": Policy(store, remediation, time.time).remaining(),
        "launch": {"argv": list(effective.argv), "env": dict(effective.env)},
        "overrides": [
            {"key": o.key, "kind": o.kind, "value": o.value, "incident": o.incident_id, "at": o.at}
            for o in overrides
        ],
        "waiting_for_human": [_incident(i) for i in waiting],
        "open_incidents": [_incident(i) for i in store.incidents(states=ACTIVE_STATES)],
        "collectors": {name: encode(c) for name, c in collectors.items()},
        "reliability": {k: asdict(v) for k, v in category_stats(store.incidents()).items()},
        "alerts": {name: encode(s) for name, s in store.sinks().items()},
    }


def _incident(i: Any) -> dict[str, Any]:
    return {
        "id": i.id,
        "category": i.category.value,
        "subject": i.subject,
        "state": i.state.value,
        "attempts": i.attempts,
        "summary": i.summary,
        "opened_at": i.opened_at,
        "resolved_at": i.resolved_at,
    }


def exit_status(data: dict[str, Any]) -> int:
    """The status a script reads (the module docstring lists them)."""
    if not data["doctor_running"]:
        return DOCTOR_DOWN
    server = data["server"]
    supervised = server is not None and bool(
        data["launch"]["argv"] or data["doctor"].get("attached")
    )
    down = supervised and (server["state"] != "RUNNING" or not data["server_process_alive"])
    return ATTENTION if data["waiting_for_human"] or down else OK


@click.command("status")
@state_dir_option
@server_option
@click.option("--json", "as_json", is_flag=True, help="The same as one JSON object.")
@click.option("--utc", is_flag=True, help="Times in UTC instead of local time.")
def status(state_dir: Path | None, server: str | None, as_json: bool, utc: bool) -> None:
    """Is the doctor running, the server's state, incidents waiting for a human, the budget
    (with several [[servers]]: of each one, or of --server NAME).

    Exit status: 0 all well, 1 something needs a human (an escalated incident nobody
    acknowledged, or a server not running), 2 no usable store, 3 the doctor not running.
    """
    shown: dict[str, dict[str, Any]] = {}
    for name, d in server_dirs(state_dir, server):
        store = open_store(d)
        try:
            shown[name] = status_dict(store)
        except DoctorError as exc:
            raise InputError(str(exc)) from None
        finally:
            store.close()
    several = list(shown) != [""]
    if as_json:
        click.echo(json.dumps({"servers": shown} if several else shown[""], indent=2))
    else:
        for name, data in shown.items():
            if several:
                click.echo(f"== server {name} ==")
            d = resolve_state_dir(state_dir)
            for line in status_lines(data, server_dir(d, name) if several else d, utc):
                click.echo(line)
    codes = [exit_status(data) for data in shown.values()]
    raise SystemExit(DOCTOR_DOWN if DOCTOR_DOWN in codes else max(codes))


def status_lines(data: dict[str, Any], state_dir: Path, utc: bool) -> list[str]:
    """``status`` as text, most urgent first."""
    out: list[str] = []
    doctor = data["doctor"] or {}
    if data["doctor_running"]:
        out.append(
            f"doctor: running (pid {doctor['pid']}, since {when(doctor['started_at'], utc)})"
        )
    elif doctor:
        out.append(
            f"doctor: NOT running since {when(data['doctor_last_seen'], utc)}"
            f" (pid {doctor['pid']} is gone); what follows is its last record"
        )
    else:
        out.append("doctor: NOT running (it never announced itself in this store)")
    out.append("server: " + _server_line(data, utc))
    sd = shlex.quote(str(state_dir))
    for i in data["waiting_for_human"]:
        out.append(
            f"WAITING FOR A HUMAN: incident #{i['id']} escalated {when(i['resolved_at'], utc)}:"
            f" {i['category']} {i['subject']}: {i['summary']}"
        )
        out.append(f"  ack: ascend-doctor incidents ack {i['id']} --state-dir {sd}")
    out.append(f"remediation mode: {doctor.get('mode', 'unknown')}")
    out.append(_budget_line(data["remediation"]))
    if data["launch"]["argv"]:
        env = " ".join(
            f"{k}={shlex.quote(v)}" for k, v in data["launch"]["env"].items() if k not in LONG_ENV
        )
        out.append("launch: " + (env + " " if env else "") + shlex.join(data["launch"]["argv"]))
    for o in data["overrides"]:
        shown = o["key"] if o["kind"] == "flag" else f"{o['key']}={o['value']}"
        out.append(f"  override {shown} (learned from incident #{o['incident']})")
    for i in data["open_incidents"]:
        out.append(
            f"open incident #{i['id']} {i['state']} {i['category']}: {i['summary']}"
            f" ({plural(i['attempts'], 'attempt')})"
        )
    for category, r in data["reliability"].items():
        out.append(
            f"{category}: {plural(r['incidents'], 'incident')}, {r['resolved']} repaired"
            + (f", MTTR {_span(r['mttr_s'])}" if r["mttr_s"] is not None else "")
            + (f", one every {_span(r['mtbi_s'])}" if r["mtbi_s"] is not None else "")
        )
    for name, c in data["collectors"].items():
        ok = "ok" if c.get("ok") else f"failing: {c.get('last_error')}"
        out.append(
            f"collector {name}: {plural(c.get('runs', 0), 'run')},"
            f" {plural(c.get('failures', 0), 'failure')}, {ok}"
        )
    for name, a in data["alerts"].items():
        last = f", last error: {a['last_error']}" if a.get("last_error") else ""
        out.append(
            f"alert sink {name} ({a.get('type')}): {a.get('sent', 0)} sent,"
            f" {a.get('queued', 0)} queued, {a.get('failed', 0)} rejected,"
            f" {plural(a.get('failures', 0), 'failed attempt')}{last}"
        )
    return out


def _server_line(data: dict[str, Any], utc: bool) -> str:
    server = data["server"]
    if server is None:
        return "never started by the doctor (nothing recorded)"
    state = str(server["state"])
    line = state + (f" (pid {server['pid']})" if server.get("pid") else "")
    line += f" since {when(server['since'], utc)}"
    if server.get("reason"):
        line += f": {server['reason']}"
    if server.get("pid") and not data["server_process_alive"]:
        line += f"; but pid {server['pid']} is gone: the server is not running"
    elif not data["doctor_running"] and state == ProcessState.RUNNING.value:
        line += " (as last recorded; nobody watches it now)"
    return line


def _budget_line(rem: dict[str, Any]) -> str:
    if "error" in rem:
        return f"remediation budget: unreadable, failing closed: {rem['error']}"
    return (
        f"remediation budget: {rem['budget_left']} of {plural(rem['budget_per_hour'], 'step')}"
        " left this hour"
        + (
            f"; breaker tripped for {', '.join(rem['breakers_tripped'])}"
            if rem["breakers_tripped"]
            else ""
        )
        + "".join(f"; {a} cooling down {s}s" for a, s in rem["cooling_down_s"].items())
    )


__all__ = ["exit_status", "status", "status_dict", "status_lines"]
