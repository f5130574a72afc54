"""The knowledge base on fixtures that mimic real incidents: diagnose names the right root
cause first, and the live daemon opens one incident of that category per fixture."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ascend_doctor.agent.daemon import Daemon
from ascend_doctor.core.config import CollectorsConfig, Config, LogsConfig, NpuSmiConfig
from ascend_doctor.core.events import Severity
from ascend_doctor.core.store import Store
from ascend_doctor.rules import load_rules
from tests.conftest import FIXTURES, wait_for

pytestmark = pytest.mark.integration

INCIDENTS = FIXTURES / "incidents"
CASES = {
    "oom-engine-dead.log": "npu_oom",
    "kv-cache-startup.log": "kv_cache_insufficient",
    "aicore-hccl-ranks": "aicore_error",
    "heartbeat-el0001": "device_fault",
}


def diagnose(*paths: Path, code: int = 0) -> dict:  # type: ignore[type-arg]
    out = subprocess.run(
        [sys.executable, "-m", "ascend_doctor", "diagnose", "--json", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == code, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", sorted(CASES))
def test_diagnose_names_the_root_cause_first(name: str) -> None:
    report = diagnose(INCIDENTS / name)
    first = report["root_causes"][0]
    assert first["category"] == CASES[name], json.dumps(report["root_causes"], indent=1)
    assert first["evidence"] and first["evidence"][0]["line"] > 0
    assert first["suggestions"]
    assert report["files_read"] >= 1 and report["lines_read"] > 10


def test_symptoms_of_other_ranks_are_symptoms() -> None:
    report = diagnose(INCIDENTS / "aicore-hccl-ranks")
    assert [c["category"] for c in report["root_causes"]][:1] == ["aicore_error"]
    assert "hccl_timeout" in {s["category"] for s in report["symptoms"]}
    assert "hccl_timeout" not in {c["category"] for c in report["root_causes"]}


def test_healthy_day_has_no_warning() -> None:
    report = diagnose(INCIDENTS / "healthy-day.log")
    found = report["root_causes"] + report["symptoms"]
    assert [
        f for f in found if Severity.parse(f.get("severity", "error")) >= Severity.WARNING
    ] == []


def test_bundle_and_unreadable_files(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        tar.add(INCIDENTS / "heartbeat-el0001", arcname="logs")
    (tmp_path / "binary.log").write_bytes(b"\0\1\2" * 100)
    # named paths that cannot be read: exit 2, and the rest is still diagnosed
    report = diagnose(bundle, tmp_path / "binary.log", tmp_path / "missing.log", code=2)
    assert report["root_causes"][0]["category"] == "device_fault"
    assert {u["path"].rsplit("/", 1)[-1]: u["error"] for u in report["unreadable"]} == {
        "binary.log": "binary file, skipped",
        "missing.log": "no such file or directory",
    }


@pytest.mark.parametrize("name", sorted(CASES))
async def test_live_daemon_opens_one_incident(tmp_path: Path, name: str) -> None:
    live = tmp_path / "live"
    (live / "plog").mkdir(parents=True)
    config = Config(
        logs=LogsConfig(paths=(str(live / "*.log"), str(live / "plog" / "*.log")), cann=False),
        collectors=CollectorsConfig(npu_smi=NpuSmiConfig(enabled=False)),
    )
    daemon = Daemon(config, tmp_path / "state", None, load_rules())
    run = asyncio.create_task(daemon.run())
    await asyncio.sleep(0)  # the daemon takes its start positions before the logs appear
    source = INCIDENTS / name
    files = sorted(source.rglob("*.log")) if source.is_dir() else [source]
    total = 0
    for f in files:
        dest = live / ("plog" if "plog" in f.parts else "") / f.name
        total += len(f.read_bytes().splitlines())
        shutil.copyfile(f, dest)

    def stored() -> list[object]:
        store = Store.in_dir(tmp_path / "state", readonly=True)
        try:
            return store.incidents()
        finally:
            store.close()

    await wait_for(lambda: daemon.engine.lines_scanned >= total, timeout=20, what="all lines read")
    await wait_for(lambda: bool(stored()), timeout=20, what="an incident")
    daemon.shutdown()
    await asyncio.wait_for(run, 20)
    incidents = stored()
    assert [(i.category.value) for i in incidents] == [CASES[name]]  # type: ignore[attr-defined]
