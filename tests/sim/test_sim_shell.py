"""``python -m ascend_doctor.sim.shell``: a simulated host for a shell, as the quickstart uses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ascend_doctor.sim.host import SimHost


def _shell(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_create_puts_npu_smi_and_vllm_on_the_path(tmp_path: Path) -> None:
    proc = _shell(
        'eval "$(python -m ascend_doctor.sim.shell create ./simhost --devices 2)"\n'
        "command -v npu-smi; command -v vllm; npu-smi info\n"
        'echo "root=$ASCEND_PROCESS_LOG_PATH"\n',
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == str(tmp_path / "simhost" / "bin" / "npu-smi")
    assert lines[1] == str(tmp_path / "simhost" / "bin" / "vllm")
    assert "910B3" in proc.stdout and "| 1     910B3" in proc.stdout
    assert "| 2     910B3" not in proc.stdout
    assert f"root={tmp_path / 'simhost' / 'ascend' / 'log'}" in lines


def test_vllm_shim_runs_the_fake_server(tmp_path: Path) -> None:
    proc = _shell(
        'eval "$(python -m ascend_doctor.sim.shell create ./simhost)"\nvllm serve --help\n',
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--max-model-len" in proc.stdout


def test_create_installs_the_chosen_release(tmp_path: Path) -> None:
    proc = _shell(
        'eval "$(python -m ascend_doctor.sim.shell create ./simhost --sim-version 0.23)"\n'
        "vllm --version\nvllm serve m --swap-space 4\n",
        tmp_path,
    )
    assert proc.stdout.splitlines()[0] == "0.23.0"
    assert "vllm: error: unrecognized arguments: --swap-space 4" in proc.stderr
    bad = _shell("python -m ascend_doctor.sim.shell create ./other --sim-version 0.9", tmp_path)
    assert bad.returncode == 2 and "known lines: 0.11, 0.13, 0.18, 0.23" in bad.stderr


def test_inject_puts_a_fault_on_a_device(tmp_path: Path) -> None:
    proc = _shell(
        "python -m ascend_doctor.sim.shell create ./simhost >/dev/null\n"
        "python -m ascend_doctor.sim.shell inject ./simhost 3 hbm_ecc\n",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "device 3: hbm_ecc"
    root = tmp_path / "simhost"
    host = SimHost(root, root / "bin", root / "state" / "npu.json", root / "ascend" / "log",
                   root / "state" / "npu-smi.log")  # fmt: skip
    assert host.device(3)["fault"] == "hbm_ecc"
    assert host.device(2)["fault"] is None


def test_inject_errors_name_the_problem(tmp_path: Path) -> None:
    proc = _shell("python -m ascend_doctor.sim.shell inject ./nothing 0 hbm_ecc", tmp_path)
    assert proc.returncode != 0 and "no simulated host here" in proc.stderr
    proc = _shell(
        "python -m ascend_doctor.sim.shell create ./simhost >/dev/null\n"
        "python -m ascend_doctor.sim.shell inject ./simhost 0 melted",
        tmp_path,
    )
    assert proc.returncode == 2 and "melted" in proc.stderr
