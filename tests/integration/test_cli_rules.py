"""rules lint / test / scan and findings through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

OOM = (
    "(EngineCore_DP0 pid=276) ERROR 09-08 02:55:31 [core.py:702] RuntimeError: NPU out of memory."
    " Tried to allocate 2.93 GiB (NPU 0; 60.97 GiB total capacity; 55.12 GiB already allocated;"
    " 55.12 GiB current active; 1.85 GiB free; 57.20 GiB reserved in total by PyTorch)"
)


def doctor(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ascend_doctor", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_lint_and_test_pass_on_shipped_packs() -> None:
    lint = doctor("rules", "lint")
    assert lint.returncode == 0, lint.stderr
    test = doctor("rules", "test")
    assert test.returncode == 0, test.stderr
    assert "every example passes" in test.stdout


def test_lint_names_file_rule_and_reason(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "rules:\n  - id: site-lookbehind\n    category: npu_oom\n    severity: error\n"
        "    source: server\n    pattern: '(?<=x)oom'\n    summary: s\n    explain: e\n"
        "    examples: {match: [xoom]}\n"
    )
    out = doctor("rules", "lint", str(tmp_path))
    assert out.returncode == 1
    assert "bad.yaml:2: rule 'site-lookbehind': hyperscan cannot compile" in out.stderr


def test_lint_refuses_unsafe_patterns_and_bad_catalogues(tmp_path: Path) -> None:
    (tmp_path / "risky.yaml").write_text(
        "rules:\n  - id: site-nested\n    category: npu_oom\n    severity: error\n"
        "    source: server\n    pattern: '(a+)+b'\n    summary: s\n    explain: e\n"
        "    examples: {match: [aab]}\n"
    )
    (tmp_path / "catalogues").mkdir()
    (tmp_path / "catalogues" / "acl_site.yaml").write_text(
        "kind: acl\ncodes:\n  - code: 999001\n    category: npu_oom\n"
        "    severity: error\n    role: root\n    meaning: m\n"
    )
    out = doctor("rules", "lint", str(tmp_path))
    assert out.returncode == 1
    assert "rule 'site-nested'" in out.stderr and "nested" in out.stderr
    assert "acl_site.yaml:3: entry has no 'source'" in out.stderr


def test_rules_test_reports_a_failing_example(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "rules:\n  - id: site-x\n    category: npu_oom\n    severity: error\n"
        "    source: server\n    pattern: 'oom here'\n    summary: s\n    explain: e\n"
        "    examples: {match: [oom there]}\n"
    )
    out = doctor("rules", "test", str(tmp_path))
    assert out.returncode == 1
    assert "rule 'site-x' (re) does not match: oom there" in out.stderr


def test_scan_stdin_json(tmp_path: Path) -> None:
    out = doctor("rules", "scan", "--json", "-", stdin=f"INFO fine\n{OOM}\n")
    assert out.returncode == 0
    (row,) = [json.loads(x) for x in out.stdout.splitlines()]
    assert row["rule"] == "torch-npu-oom" and row["line"] == 2 and row["path"] == "-"
    assert row["captures"]["requested"] == "2.93 GiB"
    assert row["category"] == "npu_oom" and row["severity"] == "critical"
