"""``bundle`` end to end: a real demo run bundled and read back by ``diagnose``; redaction and
the size limit on a small synthetic state dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ascend_doctor.cli.bundle import bundle, parse_since
from ascend_doctor.core.errors import ConfigError
from ascend_doctor.core.events import Category, Finding, Role, Severity
from ascend_doctor.core.redact import REDACTED
from ascend_doctor.core.store import Store

pytestmark = pytest.mark.integration

DOCTOR = [sys.executable, "-m", "ascend_doctor"]
MB = 1024 * 1024


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_")}
    return subprocess.run(
        [*DOCTOR, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def run_bundle(*args: str) -> None:
    result = CliRunner().invoke(bundle, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output


def members(path: Path) -> dict[str, bytes]:
    """Member name (without the top directory) -> content."""
    out: dict[str, bytes] = {}
    with tarfile.open(path) as tar:
        tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        assert len(tops) == 1 and tops.pop().startswith("bundle-")
        for m in tar.getmembers():
            f = tar.extractfile(m)
            assert f is not None
            out[m.name.split("/", 1)[1]] = f.read()
    return out


def test_diagnose_on_the_bundle_finds_the_live_root_cause(tmp_path: Path) -> None:
    state = tmp_path / "state"
    demo = doctor("demo", "--scenario", "kv-cache", "--state-dir", str(state))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    live = doctor("incidents", "--state-dir", str(state), "--json")
    incidents = [json.loads(line) for line in live.stdout.splitlines()]
    assert incidents, live.stderr

    out = tmp_path / "b.tar.gz"
    run_bundle("--state-dir", str(state), "-o", str(out), "--since", "1d")
    files = members(out)
    stored = json.loads(files["store/incidents.json"])
    assert [i["category"] for i in stored] == [i["category"] for i in incidents]
    assert stored[0]["actions"] == incidents[0]["actions"]
    server_log = "logs/" + str(state / "server.log").lstrip("/")
    assert files[server_log] == (state / "server.log").read_bytes()
    manifest = json.loads(files["MANIFEST.json"])
    assert {m["name"] for m in manifest["members"]} == set(files) - {"MANIFEST.json"}

    diag = doctor("diagnose", "--json", str(out))
    assert diag.returncode == 0, diag.stderr
    causes = json.loads(diag.stdout)["root_causes"]
    assert causes[0]["category"] == incidents[0]["category"]
    assert {c["category"] for c in causes} == {i["category"] for i in incidents}
    assert server_log in causes[0]["evidence"][0]["path"]
    assert causes[0]["count"] == 1  # the store's copies of the evidence are not scanned again
    check = json.loads(files["check.json"])
    assert check["ascend_found"] is False and check["summary"]["fail"] >= 1


def synthetic_state(tmp_path: Path) -> Path:
    """A state dir with one incident, a 3 MB server log and two 1 MB tailed logs."""
    state = tmp_path / "state"
    store = Store.in_dir(state)
    finding = Finding(
        rule="r1",
        category=Category.NPU_OOM,
        severity=Severity.ERROR,
        role=Role.ROOT,
        subject="npu0",
        summary="out of memory",
        at=1000.0,
    )
    store.add_finding(finding, store.open_incident(finding).id)
    logs = [tmp_path / "host" / "a.log", tmp_path / "host" / "b.log"]
    store.set_offsets([(f"1:{n}", str(p), 0, "", "") for n, p in enumerate(logs)])
    store.set_meta("launch", {"argv": ["vllm", "--api-key", "sk-1"], "env": {"HF_TOKEN": "x"}})
    store.close()
    line = b"INFO 12-02 10:00:00 [engine.py:1] nothing wrong here\n"
    (state / "server.log").write_bytes(line * (3 * MB // len(line)))
    for p in logs:
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(line * (MB // len(line)))
    return state


def test_secrets_are_redacted(tmp_path: Path) -> None:
    state = synthetic_state(tmp_path)
    config = tmp_path / "doctor.toml"
    config.write_text(
        '[server]\nhealth_url = "http://u:pw@h/"\nstart_timeout = 60.0\n'
        '[alerts.slack]\nwebhook_url = "https://hooks/x"\nenabled = true\n'
        '[alerts.pager]\nrouting_key = "abc"\napi_token = "t"\nDB_PASSWORD = "p"\n'
    )
    out = tmp_path / "b.tar.gz"
    run_bundle("--state-dir", str(state), "-o", str(out), "--config", str(config))
    files = members(out)
    text = files["config.toml"].decode()
    for secret in ("u:pw", "hooks/x", "abc", '"t"', '"p"'):
        assert secret not in text
    import tomllib

    parsed = tomllib.loads(text)
    assert parsed["server"] == {"health_url": REDACTED, "start_timeout": 60.0}
    assert parsed["alerts"]["slack"]["enabled"] is True
    assert parsed["alerts"]["pager"]["api_token"] == REDACTED
    meta = json.loads(files["store/meta.json"])
    assert meta["launch"] == {
        "argv": ["vllm", "--api-key", REDACTED],
        "env": {"HF_TOKEN": REDACTED},
    }
    assert b"sk-1" not in b"".join(files.values())


def test_size_limits_tail_logs_and_leave_out_what_does_not_fit(tmp_path: Path) -> None:
    state = synthetic_state(tmp_path)
    out = tmp_path / "b.tar.gz"
    run_bundle("--state-dir", str(state), "-o", str(out), "--max-log-mb", "2", "--max-mb", "3.5")
    files = members(out)
    manifest = json.loads(files["MANIFEST.json"])
    by_name: dict[str, Any] = {m["name"]: m for m in manifest["members"]}

    server = "logs/" + str(state / "server.log").lstrip("/")
    assert by_name[server]["truncated_from"] == (state / "server.log").stat().st_size
    assert len(files[server]) <= 2 * MB
    assert files[server].startswith(b"INFO ")  # the tail starts at a whole line
    # 2 MB of server log leave room for one 1 MB log in 3.5 MB, not two
    assert len([n for n in files if n.startswith("logs/")]) == 2
    (skipped,) = manifest["skipped"]
    assert skipped["source"].endswith("b.log")
    assert "size limit" in skipped["reason"]
    assert manifest["total_bytes"] <= 3.5 * MB
    assert "store/incidents.json" in files
    assert b"not found" in files["npu-smi/NOTE.txt"] or "npu-smi/info.txt" in files


def test_since_limits_incidents_and_findings(tmp_path: Path) -> None:
    state = synthetic_state(tmp_path)  # the incident and finding are at t=1000 (1970)
    out = tmp_path / "b.tar.gz"
    run_bundle("--state-dir", str(state), "-o", str(out), "--since", "2h")
    files = members(out)
    assert json.loads(files["store/findings.json"]) == []
    assert json.loads(files["store/incidents.json"]) != []  # still open: it overlaps


def test_since_parses_units() -> None:
    assert parse_since("30m") == 1800
    assert parse_since("2h") == 7200
    assert parse_since("1d") == 86400
    with pytest.raises(ConfigError):
        parse_since("2 weeks")


def test_diagnose_shows_the_profiles_of_a_bundle(tmp_path: Path) -> None:
    from ascend_doctor.agent.profiling import TORCH_KIND, summarize
    from ascend_doctor.cli.main import main
    from ascend_doctor.core.records import Artifact

    state = synthetic_state(tmp_path)
    capture = Path(__file__).parents[1] / "fixtures" / "profile" / "msprof-analyze-cluster-8rank"
    art = summarize(Artifact(TORCH_KIND, str(capture), 1, 0.0, 1.0), advisor=False)
    store = Store.in_dir(state)
    try:
        store.add_artifact(art)
    finally:
        store.close()
    out = tmp_path / "b.tar.gz"
    run_bundle("--state-dir", str(state), "-o", str(out))
    result = CliRunner().invoke(main, ["diagnose", str(out)])
    assert "PROFILES" in result.output, result.output
    assert "rank 1 is the slow rank" in result.output and "<- slow" in result.output
    data = json.loads(CliRunner().invoke(main, ["diagnose", "--json", str(out)]).output)
    (prof,) = data["profiles"]
    assert prof["headline"].startswith("rank 1 is the slow rank") and prof["path"] == str(capture)


async def test_diagnose_shows_the_evidence_kept_before_a_restart(tmp_path: Path) -> None:
    from ascend_doctor.cli.main import main
    from ascend_doctor.collectors.evidence import Keeper

    state = synthetic_state(tmp_path)
    log = tmp_path / "server.log"
    log.write_text("INFO the engine's last words\n")
    keeper = Keeper(
        state / "diagnostics",
        keep=5,
        max_bytes=MB,
        pids=lambda: [os.getpid()],
        devices=lambda: [4],
        log_paths=lambda: [str(log)],
        npu_smi="/nonexistent/npu-smi",
        metrics_url=lambda: "",
        clock=lambda: 1000.0,
    )
    await keeper.take("incident-7", "incident 7: 2 canaries in a row got no answer")
    out = tmp_path / "b.tar.gz"
    run_bundle("--state-dir", str(state), "-o", str(out), "--with-artifacts")
    assert f"artifacts/incident-7-1000/stacks-{os.getpid()}.txt" in members(out)
    result = CliRunner().invoke(main, ["diagnose", str(out)])
    assert "EVIDENCE" in result.output, result.output
    assert "incident-7-1000: incident 7: 2 canaries in a row got no answer" in result.output
    data = json.loads(CliRunner().invoke(main, ["diagnose", "--json", str(out)]).output)
    (snap,) = data["evidence"]
    assert "tail-0-server.log" in snap["files"] and "npu-smi-health-4.txt" in snap["files"]
