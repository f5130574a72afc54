"""``diagnose`` reads what npu-smi said (issue 19): a saved ``npu-smi info -t ecc`` with
uncorrectable errors is a root cause, and the doctor's stored npu-smi samples (a Health that is
not OK, uncorrectable ECC) count beside the logs and the stored incidents, from a bundle or
straight from a state dir (``--state-dir``). Run as the operator runs it: the real command in
a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascend_doctor.core.events import Category, Finding, Role, Severity
from ascend_doctor.core.store import Store
from ascend_doctor.sim.host import SimHost

pytestmark = pytest.mark.integration

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "npu_smi"
ENGINE_DEAD = (
    "(APIServer pid=728) ERROR 12-02 12:00:05 [async_llm.py:480] "
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
    "See stack trace (above) for the root cause.\n"
)


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ascend_doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )


def sim_npu_smi(host: SimHost, *args: str) -> str:
    env = {**os.environ, "PATH": host.env()["PATH"]}
    out = subprocess.run(["npu-smi", *args], env=env, capture_output=True, text=True, check=True)
    return out.stdout


def test_an_ecc_snapshot_with_uncorrectable_errors_is_a_root_cause(tmp_path: Path) -> None:
    host = SimHost.create(tmp_path / "host")
    clean = tmp_path / "ecc-3-before.txt"
    clean.write_text(sim_npu_smi(host, "info", "-t", "ecc", "-i", "3"))
    host.inject(3, "hbm_ecc")
    bad = tmp_path / "ecc-3.txt"
    bad.write_text(sim_npu_smi(host, "info", "-t", "ecc", "-i", "3"))

    proc = doctor("diagnose", "--exit-code", str(bad))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[device_fault] npu3 has 1 uncorrectable (double-bit) HBM ECC error on record" in (
        proc.stdout
    )
    assert "rule npu-smi-hbm-ecc-uncorrectable (warning), subject npu3" in proc.stdout
    assert "no known failure found" not in proc.stdout

    for quiet in (clean, REAL / "ecc-910a-doc.txt", REAL / "ecc-950-doc.txt"):
        proc = doctor("diagnose", "--exit-code", str(quiet))
        assert proc.returncode == 0, (quiet, proc.stdout, proc.stderr)
        assert "read 1 file" in proc.stdout and "no known failure found" in proc.stdout


def _state(tmp_path: Path) -> Path:
    """A state dir as a doctor leaves it: a server log it followed, an incident, and the
    last npu-smi samples (npu3 Critical with an uncorrectable ECC error, npu2 healthy)."""
    state = tmp_path / "state"
    store = Store.in_dir(state)
    now = time.time()
    store.add_sample("npu_smi", "npu2", now, {"health": "OK", "hbm_ecc_double_bit_errors": 0,
                                              "hbm_ecc_double_bit_total": 0})  # fmt: skip
    store.add_sample(
        "npu_smi",
        "npu3",
        now,
        {
            "health": "Critical",
            "health_error_code": "80E01801",
            "hbm_ecc_double_bit_errors": 1,
            "hbm_ecc_double_bit_total": 1,
            "hbm_ecc_double_bit_isolated_pages": 1,
        },
    )
    dead = Finding("vllm-engine-dead", Category.ENGINE_DEAD, Severity.ERROR, Role.SYMPTOM,
                   "server", "the engine core died", at=now)  # fmt: skip
    inc = store.open_incident(dead)
    store.add_finding(dead, inc.id)
    log = state / "server.log"
    log.write_text(ENGINE_DEAD)
    store.set_offsets([(f"ino:{log.stat().st_ino}", str(log), log.stat().st_size, "h", "f")])
    store.close()
    return state


def _check_report(out: str) -> None:
    # the card the doctor saw failing is the root cause; the engine's death in the log is
    # its consequence; the stored incident and the card's last samples are listed
    assert "npu-smi reports npu3 health Critical" in out
    assert "npu3 has 1 uncorrectable (double-bit) HBM ECC error on record" in out
    assert "EngineDeadError" in out or "engine" in out.lower()
    assert "DEVICES AS NPU-SMI LAST SHOWED THEM" in out
    listed = out.split("DEVICES AS NPU-SMI LAST SHOWED THEM", 1)[1]
    assert (
        "npu3: health Critical (80E01801); 1 uncorrectable ECC error, 1 in the card's life, "
        "1 page isolated" in listed
    )
    assert "npu2:" not in listed
    assert "INCIDENTS THE DOCTOR RECORDED" in out
    assert "no known failure found" not in out


def test_a_state_dir_is_diagnosed_from_its_store_and_its_logs(tmp_path: Path) -> None:
    state = _state(tmp_path)
    proc = doctor("diagnose", "--exit-code", "--state-dir", str(state))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _check_report(proc.stdout)
    assert "read 1 file" in proc.stdout  # the server log the doctor followed
    data = json.loads(doctor("diagnose", "--json", "--state-dir", str(state)).stdout)
    (card,) = [c for c in data["root_causes"] if c["subject"] == "npu3"]
    assert card["rule"] == "npu-smi-health-not-ok"  # the worst of the card's findings leads
    assert [e["text"] for e in card["evidence"]] == [
        "npu-smi reports npu3 health Critical",
        "npu3 has 1 uncorrectable (double-bit) HBM ECC error on record",
    ]
    assert [s["subject"] for s in data["stored_samples"]] == ["npu3"]
    # a threshold rule's own steps are the suggestion, not "no automatic fix"
    assert card["suggestions"][0].startswith("reset the device")


def test_a_bundle_carries_the_samples_to_diagnose(tmp_path: Path) -> None:
    state = _state(tmp_path)
    bundle = tmp_path / "b.tar.gz"
    made = doctor("bundle", "--state-dir", str(state), "-o", str(bundle))
    assert made.returncode == 0, made.stderr
    proc = doctor("diagnose", "--exit-code", str(bundle))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _check_report(proc.stdout)


def test_a_state_dir_without_a_store_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = doctor("diagnose", "--state-dir", str(tmp_path / "nothing"))
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("no store here (has the doctor run?)")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = doctor("diagnose")
    assert proc.returncode == 2 and "--state-dir" in proc.stderr
