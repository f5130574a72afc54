"""status, overrides list/clear and incidents ack through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.events import Category, Finding, ProcessState, Role, Severity
from ascend_doctor.core.procs import process_start
from ascend_doctor.core.records import (
    BudgetEntry,
    DoctorStatus,
    LaunchRecord,
    Ledger,
    ServerStatus,
)
from ascend_doctor.core.store import Store

pytestmark = pytest.mark.integration


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ascend_doctor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def state_with_an_override(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    store = Store.in_dir(state)
    f = Finding(
        "vllm-kv-cache-max-len-estimate",
        Category.KV_CACHE_INSUFFICIENT,
        Severity.CRITICAL,
        Role.ROOT,
        "server",
        "KV cache too small",
        at=1.0,
    )
    inc = store.open_incident(f)
    store.set_override("--max-model-len", "arg", "15744", inc.id)
    store.set_launch(LaunchRecord(("vllm", "serve", "m", "--max-model-len", "32768")))
    now = time.time()
    me, began = os.getpid(), process_start(os.getpid()) or 0.0  # a live doctor and server
    store.set_server(ServerStatus(ProcessState.RUNNING, me, now, "/health answered 200", began))
    store.set_doctor(
        DoctorStatus(
            pid=me,
            proc_start=began,
            started_at=now,
            mode="auto",
            dry_run=False,
            attached=False,
            remediation=RemediationConfig(budget_per_hour=4),
        )
    )
    store.set_ledger(
        Ledger(
            history=(
                BudgetEntry(now - 60, "kv_cache_insufficient"),
                BudgetEntry(now - 7200, "x"),
            ),
            last_run={"lower_max_model_len": now - 60},
        )
    )
    store.close()
    return state


def test_status_shows_the_effective_command_and_where_each_change_came_from(
    tmp_path: Path,
) -> None:
    state = state_with_an_override(tmp_path)
    out = doctor("status", "--state-dir", str(state))
    assert out.returncode == 0, out.stderr
    assert f"server: RUNNING (pid {os.getpid()}) since " in out.stdout
    assert "launch: vllm serve m --max-model-len 15744" in out.stdout
    assert "override --max-model-len=15744 (learned from incident #1)" in out.stdout
    # the running doctor's budget (4/h, one step used an hour ago does not count)
    assert "remediation budget: 3 of 4 steps left this hour; lower_max_model_len cooling down" in (
        out.stdout
    )
    # MTTR and time between incidents per category (one open incident: nothing repaired yet)
    assert "kv_cache_insufficient: 1 incident, 0 repaired" in out.stdout
    data = json.loads(doctor("status", "--state-dir", str(state), "--json").stdout)
    assert data["launch"]["argv"][-2:] == ["--max-model-len", "15744"]
    assert data["reliability"]["kv_cache_insufficient"] == {
        "incidents": 1,
        "resolved": 0,
        "mttr_s": None,
        "mtbi_s": None,
    }
    assert [i["category"] for i in data["open_incidents"]] == ["kv_cache_insufficient"]


def test_overrides_clear_and_incident_ack(tmp_path: Path) -> None:
    state = state_with_an_override(tmp_path)
    assert "--max-model-len 15744" in doctor("overrides", "list", "--state-dir", str(state)).stdout
    assert doctor("overrides", "clear", "--state-dir", str(state)).stdout.startswith("cleared 1")
    assert doctor("overrides", "list", "--state-dir", str(state)).stdout.strip() == "no overrides"
    assert doctor("incidents", "ack", "1", "--state-dir", str(state)).returncode == 0
    (row,) = [
        json.loads(x)
        for x in doctor("incidents", "--state-dir", str(state), "--json").stdout.splitlines()
    ]
    assert row["acknowledged"] is True
    missing = doctor("incidents", "ack", "9", "--state-dir", str(state))
    assert missing.returncode == 1 and "no incident #9" in missing.stderr
