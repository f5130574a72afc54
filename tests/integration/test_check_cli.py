"""``check`` through click: fixture hosts, ``--json``, and this machine (no Ascend software)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ascend_doctor.cli.check import check

pytestmark = pytest.mark.integration

CASES = Path(__file__).parent.parent / "fixtures" / "check"
SOURCED = {
    "ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest",
    "LD_LIBRARY_PATH": "/usr/local/Ascend/ascend-toolkit/latest/lib64",
    "ASCEND_RT_VISIBLE_DEVICES": "0,1",
}


def run(case: str, tmp_path: Path, *extra: str) -> tuple[int, str]:
    args = [
        "--root",
        str(CASES / case),
        "--python",
        str(CASES / case / "bin" / "python"),
        "--npu-smi",
        str(CASES / "bin" / "npu-smi"),
        "--port",
        "0",
        "--state-dir",
        str(tmp_path),
        *extra,
    ]
    result = CliRunner().invoke(check, args, env=SOURCED)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def rows(output: str) -> dict[str, dict[str, Any]]:
    data = json.loads(output)
    assert set(data) == {"checks", "summary", "ascend_found"}
    assert sum(data["summary"].values()) == len(data["checks"])
    return {row["name"]: row for row in data["checks"]}


def test_good_host_exits_zero_with_a_table(tmp_path: Path) -> None:
    code, out = run("good", tmp_path)
    assert code == 0, out
    assert "compat.torch_npu" in out
    assert "summary: 17 pass, 0 warn, 0 fail, 1 skip" in out


def test_good_host_json(tmp_path: Path) -> None:
    code, out = run("good", tmp_path, "--json")
    assert code == 0
    data = rows(out)
    assert all(r["status"] in ("pass", "skip") for r in data.values())
    assert data["visible_devices"]["detail"] == "ASCEND_RT_VISIBLE_DEVICES=0,1"


def test_old_cann_host_fails_naming_the_fit(tmp_path: Path) -> None:
    code, out = run("old-cann", tmp_path, "--json")
    assert code == 1
    cann = rows(out)["compat.cann"]
    assert cann["status"] == "fail"
    assert "install CANN 8.5.0: vllm-ascend 0.13.0 + vLLM 0.13.0" in cann["fix"]


def test_mismatched_torch_host_fails_naming_the_fit(tmp_path: Path) -> None:
    code, out = run("mismatched-torch", tmp_path, "--json")
    assert code == 1
    data = rows(out)
    assert data["compat.torch_npu"]["status"] == "fail"
    assert "torch 2.7.1 / torch_npu 2.7.1.post1" in data["compat.torch_npu"]["fix"]
    assert json.loads(out)["summary"]["fail"] == 2


def test_this_machine_says_no_ascend_in_a_few_lines() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from ascend_doctor.cli.check import check; check()"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "no Ascend software on this host" in proc.stdout
    assert len(proc.stdout.splitlines()) <= 8
