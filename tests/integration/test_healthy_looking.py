"""The failures that look healthy (/health 200), end to end through ``ascend-doctor demo``:
a server stuck with nothing running, output turned to garbage, memory that creeps. Outcomes
are read back as an operator would (``incidents --json``) and from the store the doctor wrote."""

from __future__ import annotations

import json
from pathlib import Path

from ascend_doctor.core.store import Store
from tests.integration.test_scenarios import incidents, only, run_scenario, version

__all__ = ["version"]  # the fixture: every scenario on the oldest and the newest release


def captures(state: Path, incident_id: int) -> dict[str, str]:
    store = Store.in_dir(state, readonly=True)
    try:
        (root,) = [f.finding for f in store.findings(incident_id) if f.finding.role == "root"]
        return root.captures
    finally:
        store.close()


def test_stuck_with_nothing_running_is_restarted_with_stacks_kept(
    tmp_path: Path, version: str
) -> None:
    result, state = run_scenario(tmp_path, "stuck-idle", version)
    assert result.returncode == 0, result.stdout + result.stderr
    inc = only(incidents(state), "server_unresponsive")
    assert inc["state"] == "resolved" and inc["rule"] == "canary-unanswered-idle"
    # seen on the second unanswered canary, with nothing running: two canary intervals
    seen = captures(state, inc["id"])
    assert seen["canary_timeouts"] == "2" and float(seen["running"]) == 0
    assert not [r for r in incidents(state) if r["category"] == "server_hang"]
    names = [(a["name"], a["outcome"]) for a in inc["actions"]]
    assert names[:2] == [("collect_diagnostics", "ok"), ("restart", "ok")]
    assert names[-1] == ("verify", "ok")
    snap = inc["actions"][0]["params"]
    stacks = [f for f in snap["files"] if f.startswith("stacks-")]
    assert len(stacks) >= 2  # the API server and the engine core, each with its threads
    index = json.loads((Path(snap["dir"]) / "index.json").read_text())
    assert index["reason"].startswith(f"incident {inc['id']}: ")
    for name in stacks:
        assert "thread" in (Path(snap["dir"]) / name).read_text()
    assert "npu-smi-health-4.txt" in snap["files"] and "metrics.txt" in snap["files"]
    # the card's ECC counters as npu-smi printed them (issue 20: ECC for its devices)
    ecc = (Path(snap["dir"]) / "npu-smi-ecc-4.txt").read_text()
    assert "HBM Double Bit Error Count               : 0" in ecc


def test_garbled_output_is_escalated_with_the_bad_output_quoted(
    tmp_path: Path, version: str
) -> None:
    result, state = run_scenario(tmp_path, "garbled-output", version)
    assert result.returncode == 0, result.stdout + result.stderr
    inc = only(incidents(state), "output_corrupt")
    assert inc["state"] == "escalated" and inc["rule"] == "canary-output-garbled"
    assert "'!!!!!!!!'" in inc["summary"]
    seen = captures(state, inc["id"])
    assert seen["canary_failures"] == "1"  # the first failing canary
    names = [(a["name"], a["outcome"]) for a in inc["actions"]]
    assert names == [("collect_diagnostics", "ok"), ("escalate", "ok")]
    assert not any(a["name"] == "restart" for a in inc["actions"])
    # the answer this launch gave at its first healthy start was kept as the reference
    refs = json.loads((state / "canary-reference.json").read_text())
    assert list(refs.values()) == [" Paris. It is the capital and the largest"]


def test_memory_creep_restarts_in_a_quiet_window_before_the_oom(
    tmp_path: Path, version: str
) -> None:
    result, state = run_scenario(tmp_path, "memory-creep", version)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = incidents(state)
    inc = only(rows, "memory_creep")
    assert inc["state"] == "resolved" and inc["subject"] == "npu1"
    names = [a["name"] for a in inc["actions"]]
    # it waited while the traffic was served, then restarted once it stopped
    assert names[0] == "plan" and "waits for a quiet window" in inc["actions"][0]["reason"]
    assert names[-3:] == ["collect_diagnostics", "restart_when_quiet", "verify"]
    seen = captures(state, inc["id"])
    assert float(seen["hbm_oom_eta_s"]) < 40 and float(seen["hbm_growth_mb_per_h"]) > 0
    assert not [r for r in rows if r["category"] == "npu_oom"]
    assert "out of memory" not in (state / "server.log").read_text()
