"""``ascend-doctor tui``: its arguments and errors (the app itself is driven by Pilot)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ascend_doctor", "tui", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_state_dir_without_store_is_a_one_line_error(tmp_path: Path) -> None:
    out = run("--state-dir", str(tmp_path))
    assert out.returncode == 2  # unusable input, as for every command
    assert f"{tmp_path / 'doctor.db'}: no store here" in out.stderr


def test_store_and_state_dir_together_are_refused(tmp_path: Path) -> None:
    out = run("--state-dir", str(tmp_path), "--store", str(tmp_path / "x.db"))
    assert out.returncode == 2
    assert "not both" in out.stderr


def test_missing_store_file(tmp_path: Path) -> None:
    out = run("--store", str(tmp_path / "copy.db"))
    assert out.returncode == 2
    assert "no such store file" in out.stderr


def test_help_lists_tui_and_demo_tui() -> None:
    main = subprocess.run(
        [sys.executable, "-m", "ascend_doctor", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "tui" in main.stdout
    demo = subprocess.run(
        [sys.executable, "-m", "ascend_doctor", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "--tui" in demo.stdout
