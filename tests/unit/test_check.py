"""The preflight checks of ``ascend-doctor check`` on fixture trees and on plain values."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from ascend_doctor.cli.check import (
    CheckOptions,
    CheckReport,
    CheckResult,
    Status,
    cann_key,
    compat_checks,
    find_row,
    hugepages,
    load_compat,
    port_free,
    probe_python,
    release,
    run_checks,
    toolkit_env,
    visible_devices,
)
from ascend_doctor.collectors.npu_smi import parse_info
from ascend_doctor.core.errors import RuleError

CASES = Path(__file__).parent.parent / "fixtures" / "check"
NPU_SMI = CASES / "bin" / "npu-smi"
SOURCED = {
    "ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest",
    "LD_LIBRARY_PATH": (
        "/usr/local/Ascend/driver/lib64:/usr/local/Ascend/ascend-toolkit/latest/lib64"
    ),
    "PATH": "/usr/bin:/bin",
}


def report(case: str, tmp_path: Path, **env: str) -> dict[str, CheckResult]:
    opts = CheckOptions(
        root=CASES / case,
        python=str(CASES / case / "bin" / "python"),
        npu_smi=str(NPU_SMI),
        port=0,
        state_dir=tmp_path / "state",
        env={**SOURCED, **env},
    )
    return {r.name: r for r in run_checks(opts).results}


def test_release_and_cann_key_order() -> None:
    assert release("2.7.1.post1+cpu") == (2, 7, 1)
    assert release("v0.11.0rc1") == (0, 11, 0)
    keys = [cann_key(v) for v in ("8.2.RC1", "8.3.RC2", "8.3.0", "8.5.1", "9.1.0.beta.1")]
    assert all(k is not None for k in keys)
    assert keys == sorted(keys, key=lambda k: k or ())
    assert cann_key("8.3.rc2") == cann_key("8.3.RC2")
    assert cann_key("garbage") is None


def test_shipped_table_loads_with_the_documented_rows() -> None:
    rows = load_compat()
    row = find_row(rows, "0.11.0")
    assert row is not None
    assert (row.vllm, row.cann[0], row.torch, row.torch_npu[0]) == (
        "0.11.0",
        "8.3.RC2",
        "2.7.1",
        "2.7.1.post1",
    )
    new = find_row(rows, "0.23.0")
    assert new is not None and new.cann[0] == "9.1.0" and new.torch == "2.10.0"
    # an rc of a release line falls back to that line's row
    assert find_row(rows, "0.11.0rc3") is row
    assert find_row(rows, "0.1.0") is None


def test_bad_table_names_file_row_and_key(tmp_path: Path) -> None:
    path = tmp_path / "compat.yaml"
    path.write_text("rows:\n  - vllm_ascend: '0.11.0'\n    vllm: '0.11.0'\n    torch: 2.7\n")
    with pytest.raises(RuleError, match=r"rows\[0\]\.torch is 2\.7"):
        load_compat(path)
    path.write_text("rows: []\n")
    with pytest.raises(RuleError, match="'rows' is missing"):
        load_compat(path)


def test_good_host_passes_every_version_check(tmp_path: Path) -> None:
    rows = report("good", tmp_path)
    for name in (
        "driver",
        "firmware",
        "cann",
        "python.torch",
        "python.torch_npu",
        "python.vllm",
        "python.vllm_ascend",
        "compat.vllm",
        "compat.cann",
        "compat.torch",
        "compat.torch_npu",
        "npu_smi",
        "npu.health",
        "toolkit_env",
        "port",
        "disk",
    ):
        assert rows[name].status is Status.PASS, rows[name]
    assert rows["driver"].detail == "driver 24.1.rc2"
    assert rows["cann"].detail == "CANN toolkit 8.3.RC2"
    assert rows["hugepages"].status is Status.SKIP


def test_old_cann_is_named_with_the_fitting_stacks(tmp_path: Path) -> None:
    rows = report("old-cann", tmp_path)
    cann = rows["compat.cann"]
    assert cann.status is Status.FAIL
    assert "CANN 8.3.RC2 is too old for vllm-ascend 0.13.0" in cann.detail
    # the stack of the installed vllm-ascend, and the one that fits the installed CANN
    assert "vllm-ascend 0.13.0 + vLLM 0.13.0 + CANN 8.5.0 + torch 2.8.0 + torch_npu 2.8.0" in (
        cann.fix
    )
    assert "with CANN 8.3.RC2 installed: vllm-ascend 0.11.0 + vLLM 0.11.0 + CANN 8.3.RC2" in (
        cann.fix
    )
    assert rows["compat.torch"].status is Status.PASS
    assert rows["compat.torch_npu"].status is Status.PASS


def test_mismatched_torch_npu_is_named_with_the_fitting_pair(tmp_path: Path) -> None:
    rows = report("mismatched-torch", tmp_path)
    npu = rows["compat.torch_npu"]
    assert npu.status is Status.FAIL
    assert "torch_npu 2.7.1.post1 does not pair with torch 2.8.0" in npu.detail
    assert "torch 2.7.1 / torch_npu 2.7.1.post1" in npu.fix
    torch = rows["compat.torch"]
    assert torch.status is Status.FAIL
    assert "torch 2.8.0 does not fit vllm-ascend 0.11.0 (needs torch 2.7.1)" in torch.detail
    assert "with torch 2.8.0 installed: vllm-ascend 0.13.0" in torch.fix
    # vLLM built with VLLM_TARGET_DEVICE=empty carries a local version; still the same line
    assert rows["compat.vllm"].status is Status.PASS
    assert rows["hugepages"].status is Status.PASS
    assert rows["hugepages"].detail == "512 of 1024 hugepages free"


def test_vllm_from_another_line_fails() -> None:
    rows = load_compat()
    versions = {"torch": "2.7.1", "torch_npu": "2.7.1.post1", "vllm": "0.13.0"}
    out = {r.name: r for r in compat_checks(rows, versions | {"vllm_ascend": "0.11.0"}, "8.3.RC2")}
    assert out["compat.vllm"].status is Status.FAIL
    assert "install vLLM 0.11.0: vllm-ascend 0.11.0 + vLLM 0.11.0" in out["compat.vllm"].fix
    unknown = compat_checks(rows, versions | {"vllm_ascend": "0.1.0"}, "8.3.RC2")
    assert [r.status for r in unknown] == [Status.WARN]
    assert compat_checks(rows, {"vllm_ascend": None}, None)[0].status is Status.SKIP


def test_newer_cann_than_tested_warns() -> None:
    versions = {"torch": "2.7.1", "torch_npu": "2.7.1.post1", "vllm": "0.11.0"}
    out = compat_checks(load_compat(), versions | {"vllm_ascend": "0.11.0"}, "8.5.0")
    cann = next(r for r in out if r.name == "compat.cann")
    assert cann.status is Status.WARN and "not the tested version" in cann.detail


def test_missing_package_is_reported_not_raised(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text(
        '#!/bin/sh\necho \'{"torch": "2.7.1", "torch_npu": null, "vllm": null, '
        '"vllm_ascend": null}\'\n'
    )
    fake.chmod(0o755)
    versions, why = probe_python(str(fake))
    assert versions == {"torch": "2.7.1", "torch_npu": None, "vllm": None, "vllm_ascend": None}
    assert why == ""


def test_real_probe_prints_the_format_the_fakes_copy() -> None:
    versions, why = probe_python(sys.executable)
    assert why == ""
    assert versions is not None
    assert set(versions) == {"torch", "torch_npu", "vllm", "vllm_ascend"}


def test_unrunnable_python_is_one_fail_row(tmp_path: Path) -> None:
    versions, why = probe_python(str(tmp_path / "nope"))
    assert versions is None and "cannot run" in why
    opts = CheckOptions(
        root=tmp_path,
        python=str(tmp_path / "nope"),
        npu_smi=str(tmp_path / "no-npu-smi"),
        port=0,
        state_dir=tmp_path,
        env={},
    )
    rep = run_checks(opts)
    rows = {r.name: r for r in rep.results}
    assert rows["python"].status is Status.FAIL
    assert not rep.ascend_found and rep.failed


def test_visible_devices_against_present_devices() -> None:
    info = parse_info((CASES / "npu-smi-info.txt").read_text())
    assert visible_devices({}, info).status is Status.PASS
    assert visible_devices({"ASCEND_RT_VISIBLE_DEVICES": "0,1"}, info).status is Status.PASS
    bad = visible_devices({"ASCEND_RT_VISIBLE_DEVICES": "0,3"}, info)
    assert bad.status is Status.FAIL and "[3]" in bad.detail and "0..1" in bad.detail
    assert visible_devices({"ASCEND_RT_VISIBLE_DEVICES": "a"}, info).status is Status.FAIL
    assert visible_devices({"ASCEND_RT_VISIBLE_DEVICES": "1,1"}, info).status is Status.FAIL
    assert visible_devices({"ASCEND_RT_VISIBLE_DEVICES": "0"}, None).status is Status.WARN


def test_toolkit_env_needs_home_and_loader_path() -> None:
    assert toolkit_env(SOURCED).status is Status.PASS
    assert toolkit_env({}).status is Status.FAIL
    no_lib = toolkit_env({"ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest"})
    assert no_lib.status is Status.FAIL and "set_env.sh" in no_lib.fix


def test_port_taken_fails() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        taken = port_free(port)
    assert taken.status is Status.FAIL and str(port) in taken.detail


def test_hugepages_all_used_warns(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("HugePages_Total:    8\nHugePages_Free:     0\n")
    assert hugepages(tmp_path).status is Status.WARN
    assert hugepages(tmp_path / "missing").status is Status.SKIP


def test_unhealthy_device_fails(tmp_path: Path) -> None:
    critical = Path(__file__).parent.parent / "fixtures" / "npu_smi" / "info-910b-critical.txt"
    smi = tmp_path / "npu-smi"
    smi.write_text(f"#!/bin/sh\ncat '{critical}'\n")
    smi.chmod(0o755)
    opts = CheckOptions(
        root=CASES / "good",
        python=str(CASES / "good" / "bin" / "python"),
        npu_smi=str(smi),
        port=0,
        state_dir=tmp_path,
        env=SOURCED,
    )
    rows = {r.name: r for r in run_checks(opts).results}
    assert rows["npu.health"].status is Status.FAIL
    assert "Critical" in rows["npu.health"].detail


def test_summary_counts_and_json_shape() -> None:
    rep = CheckReport(
        results=(
            CheckResult("a", Status.PASS, "ok"),
            CheckResult("b", Status.FAIL, "bad", "fix it"),
        ),
        ascend_found=True,
    )
    assert rep.summary() == {"pass": 1, "warn": 0, "fail": 1, "skip": 0}
    data = rep.to_json()
    assert data["checks"][1] == {"name": "b", "status": "fail", "detail": "bad", "fix": "fix it"}
    assert rep.failed
