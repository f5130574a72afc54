"""Options and errors the way people type them (issue 19): one input rule and one set of exit
codes for ``rules scan`` and ``diagnose`` (2 unusable input, 1 found with --exit-code), ``-``
for stdin/stdout, one line instead of a traceback for an unusable state dir, a store that is
not one, a bundle path whose directory does not exist; the demo cleans up and stops politely."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_doctor.cli.demo import _params
from tests.conftest import poll

pytestmark = pytest.mark.integration

OOM = (
    "[rank0]: RuntimeError: NPU out of memory. Tried to allocate 2.93 GiB (NPU 0; 60.96 GiB"
    " total capacity; 55.87 GiB already allocated; 55.87 GiB current active; 1.02 GiB free;"
    " 58.20 GiB reserved in total by PyTorch)"
)


def doctor(
    *args: str, stdin: str | bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    out = subprocess.run(
        [sys.executable, "-m", "ascend_doctor", *args],
        input=data,
        capture_output=True,
        timeout=120,
        check=False,
        env=env,
    )
    return subprocess.CompletedProcess(
        out.args, out.returncode, out.stdout.decode(errors="replace"), out.stderr.decode()
    )


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    path = tmp_path / "core.log"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 10)
    return path


def test_a_missing_or_binary_file_is_exit_2_for_scan_and_diagnose(
    tmp_path: Path, binary: Path
) -> None:
    missing = str(tmp_path / "missing.log")
    for args in (["rules", "scan", missing], ["diagnose", missing]):
        out = doctor(*args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "no such file or directory" in out.stderr.lower()
        assert "no known failure found" not in out.stdout
        assert "Traceback" not in out.stderr
    for args in (["rules", "scan", str(binary)], ["diagnose", str(binary)]):
        out = doctor(*args)
        assert out.returncode == 2 and "binary file" in out.stderr, (args, out.stderr)


def test_stdin_and_exit_code_are_the_same_for_scan_and_diagnose() -> None:
    for args in (["rules", "scan"], ["diagnose"]):
        found = doctor(*args, "-", stdin=f"INFO fine\n{OOM}\n")
        assert found.returncode == 0, (args, found.stderr)
        assert "NPU out of memory" in found.stdout, args
        asked = doctor(*args, "--exit-code", "-", stdin=f"{OOM}\n")
        assert asked.returncode == 1, args
        clean = doctor(*args, "--exit-code", "-", stdin="INFO all fine\n")
        assert clean.returncode == 0, (args, clean.stdout, clean.stderr)
    assert "read 1 file, 2 lines" in doctor("diagnose", "-", stdin=f"a\n{OOM}\n").stdout


def test_a_store_that_is_not_one_and_a_bundle_dir_that_does_not_exist(tmp_path: Path) -> None:
    notdb = tmp_path / "notes.txt"
    notdb.write_text("not a database\n")
    out = doctor("tui", "--store", str(notdb))
    assert out.returncode == 2 and "not an ascend-doctor store" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    state = tmp_path / "state"
    state.mkdir()
    target = tmp_path / "no" / "such" / "x.tar.gz"
    out = doctor("bundle", "--state-dir", str(state), "-o", str(target))
    assert out.returncode == 2 and "no such directory" in out.stderr
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", ["watch", "demo"])
def test_an_unusable_state_dir_is_one_line(tmp_path: Path, command: str) -> None:
    afile = tmp_path / "a-file"
    afile.write_text("")
    out = doctor(command, "--state-dir", str(afile / "state"))
    assert out.returncode == 2, out.stderr
    assert "cannot use as the state dir" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_timeline_says_what_changed_as_an_operator_writes_it() -> None:
    assert _params("lower_max_model_len", {"from": 32768, "to": 16128, "fits": 16162}) == (
        "  (--max-model-len 32768 → 16128)"
    )
    assert _params("restart", {"args": {"--enforce-eager": ""}, "env": {}}) == (
        "  (+ --enforce-eager)"
    )
    assert _params("restart", {"args": {}, "env": {}}) == ""
    assert _params("reset_device", {"device": 3}) == "  (NPU 3)"
    assert _params(
        "raise_hccl_timeout", {"name": "HCCL_EXEC_TIMEOUT", "from": 1836, "to": 3600}
    ) == ("  (HCCL_EXEC_TIMEOUT=1836 → 3600)")


def test_demo_leaves_no_temp_dir_prints_no_dicts_and_exports_to_stdout(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    state = tmp_path / "state"
    env = {**os.environ, "TMPDIR": str(tmp)}
    out = doctor("demo", "--scenario", "kv-cache", "--state-dir", str(state), env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert list(tmp.iterdir()) == [], "the demo left a temp dir behind"
    assert "{'" not in out.stdout and "--max-model-len 32768 → " in out.stdout
    assert f"state dir: {state}" in out.stdout
    export = doctor("traces", "export", "--incident", "1", "-o", "-", "--state-dir", str(state))
    assert export.returncode == 0, export.stderr
    assert json.loads(export.stdout)["resourceSpans"]
    assert "to standard output" in export.stderr
    assert not Path("-").exists()


def test_ctrl_c_during_the_demo_prints_the_partial_summary(tmp_path: Path) -> None:
    state = tmp_path / "state"
    log = tmp_path / "demo.out"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ascend_doctor", "demo", "--state-dir", str(state)],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        poll(lambda: "result:" in log.read_text(), 90, "the first scenario to end")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert re.search(r"interrupted after [12] of \d+ scenarios", text), text
    assert "Traceback" not in text
    assert f"state dir: {state}" in text.split("interrupted")[1]
