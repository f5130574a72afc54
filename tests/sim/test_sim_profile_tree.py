"""What the simulated profile tree holds: the files of a real capture, a load-shaped split,
the injected slow part; and that the analysis and msprof-analyze read it."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ascend_doctor.collectors.profiling import analyze
from ascend_doctor.sim.msprof import SLOW_KEY, write_ascend_pt, write_prof
from ascend_doctor.sim.state import STATE_ENV, initial_state, write_state

PID = 4321


def _host(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    devices: list[int],
    slow: dict[str, object] | None = None,
) -> None:
    state = initial_state(8, 0.1, 0.1, tmp_path / "npu-smi.log")
    state["processes"] = [
        {"device": d, "pid": PID, "name": "python3", "memory_mb": 1000} for d in devices
    ]
    if slow is not None:
        state[SLOW_KEY] = slow
    write_state(tmp_path / "state.json", state)
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "state.json"))


def _capture(tmp_path: Path, tokens: int | None = None) -> Path:
    root = tmp_path / "prof"
    root.mkdir(parents=True, exist_ok=True)
    now = time.time()
    write_ascend_pt(root, PID, now - 3, now, tokens=tokens)
    return root


def test_each_rank_gets_a_torch_npu_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(tmp_path, monkeypatch, [4, 5])
    root = _capture(tmp_path)
    tops = sorted(root.glob("*_ascend_pt"))
    assert [t.name.split("_")[1] for t in tops] == [str(PID), str(PID + 1)]
    for rank, top in enumerate(tops):
        info = json.loads((top / f"profiler_info_{rank}.json").read_text())
        assert info["rank_id"] == rank
        assert info["config"]["experimental_config"]["_profiler_level"] == "Level1"
        out = top / "ASCEND_PROFILER_OUTPUT"
        names = sorted(p.name for p in out.iterdir())
        assert names == [
            "communication.json",
            "kernel_details.csv",
            "op_statistic.csv",
            "operator_details.csv",
            "step_trace_time.csv",
            "trace_view.json",
        ]
        (row,) = csv.DictReader((out / "step_trace_time.csv").read_text().splitlines())
        assert row["Device_id"] == str(4 + rank) and row["Step"] == ""
        parts = [float(row[k]) for k in ("Computing", "Communication(Not Overlapped)", "Free")]
        assert all(p > 0 for p in parts) and float(row["Stage"]) == pytest.approx(sum(parts))
        events = json.loads((out / "trace_view.json").read_text())
        labels = {e["args"]["labels"] for e in events if e["name"] == "process_labels"}
        assert labels == {"CPU", f"NPU {4 + rank}"}


def test_the_files_agree_with_each_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(tmp_path, monkeypatch, [0, 1])
    report = analyze(_capture(tmp_path), advisor=False)
    out = Path(report.ranks[0].path) / "ASCEND_PROFILER_OUTPUT"
    events = json.loads((out / "trace_view.json").read_text())
    ov = {e["pid"] for e in events if e.get("args", {}).get("name") == "Overlap Analysis"}
    comp = sum(
        e["dur"] for e in events if e["ph"] == "X" and e["pid"] in ov and e["name"] == "Computing"
    )
    split = report.ranks[0].split
    assert split is not None and split.source == "step_trace_time.csv"
    assert split.computing_us == pytest.approx(comp, abs=0.01)
    kernels = list(csv.DictReader((out / "kernel_details.csv").read_text().splitlines()))
    hccl = sum(float(k["Duration(us)"]) for k in kernels if k["Accelerator Core"] == "HCCL")
    comm = json.loads((out / "communication.json").read_text())["step"]["collective"]
    elapse = sum(v["Communication Time Info"]["Elapse Time(ms)"] for v in comm.values())
    assert hccl == pytest.approx(elapse * 1000, rel=1e-6)
    assert all(k["Start Time(us)"].endswith("\t") for k in kernels)


def test_light_load_leaves_the_npu_free(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(tmp_path, monkeypatch, [0])
    busy = analyze(_capture(tmp_path / "a"), advisor=False).ranks[0].split
    light = analyze(_capture(tmp_path / "b", tokens=5), advisor=False).ranks[0].split
    assert busy is not None and light is not None
    assert busy.free_us / busy.total_us < 0.5 < light.free_us / light.total_us
    idle = tmp_path / "c"
    (idle / "prof").mkdir(parents=True)
    write_ascend_pt(idle / "prof", PID, time.time() - 1, time.time(), tokens=0)
    assert not list(idle.glob("prof/*/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"))


def test_a_slow_operator_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(
        tmp_path,
        monkeypatch,
        [0, 1, 2, 3],
        {"rank": 2, "part": "operator", "factor": 3.0, "operator": "MatMulV2"},
    )
    report = analyze(_capture(tmp_path), advisor=False)
    slow = report.slowest
    assert slow is not None and (slow.rank, slow.part, slow.operator) == (
        2,
        "computing",
        "MatMulV2",
    )
    assert "rank 2 is the slow rank" in report.headline and "MatMulV2" in report.headline
    waits = {r.rank: sum(c.wait_us for c in r.collectives) for r in report.ranks}
    assert waits[2] < min(w for k, w in waits.items() if k != 2)


def test_a_slow_collective_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(tmp_path, monkeypatch, [0, 1], {"rank": 1, "part": "collective", "factor": 6.0})
    report = analyze(_capture(tmp_path), advisor=False)
    slow = report.slowest
    assert slow is not None and slow.rank == 1
    assert (slow.part, slow.operator) == ("communication not overlapped", "hcom_allReduce")
    assert "waits least in the collectives" in report.headline


def test_an_even_group_has_no_slow_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(tmp_path, monkeypatch, [0, 1])
    report = analyze(_capture(tmp_path), advisor=False)
    assert report.slowest is None and "the ranks are even" in report.headline


def test_msprof_capture_holds_every_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(tmp_path, monkeypatch, [2, 3], {"rank": 0, "part": "operator", "factor": 4.0})
    now = time.time()
    top = write_prof(tmp_path, PID, now - 2, now)
    for d, rank in ((2, 0), (3, 1)):
        assert json.loads((top / f"device_{d}" / f"info.json.{d}").read_text())["rank_id"] == rank
    report = analyze(top, advisor=False)
    assert [r.rank for r in report.ranks] == [2, 3]  # msprof labels its tracks by device
    assert report.slowest is not None and report.slowest.rank == 2
    assert report.slowest.operator == "MatMulV2"  # op_summary rows are told apart by Device_id
    mm = [next(o.total_us for o in r.top_operators if o.name == "MatMulV2") for r in report.ranks]
    assert mm[0] == pytest.approx(4 * mm[1])


MSPROF_ANALYZE = shutil.which("msprof-analyze")
needs_msprof_analyze = pytest.mark.skipif(
    MSPROF_ANALYZE is None,
    reason="msprof-analyze is not installed (pip install 'ascend-doctor[profile]')",
)


@needs_msprof_analyze
def test_msprof_analyze_advisor_sees_the_step_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _host(tmp_path, monkeypatch, [0])
    root = _capture(tmp_path)
    (top,) = root.glob("*_ascend_pt")
    assert MSPROF_ANALYZE is not None
    done = subprocess.run(
        [MSPROF_ANALYZE, "advisor", "all", "-d", str(top), "-o", str(tmp_path / "o"), "-l", "en"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if "The Model E2E Time is" in x)
    e2e = float(line.split("The Model E2E Time is")[1].split("ms")[0])
    split = analyze(root, advisor=False).ranks[0].split
    assert split is not None and e2e == pytest.approx(split.total_us / 1000, abs=0.01)


@needs_msprof_analyze
def test_msprof_analyze_cluster_reads_every_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _host(tmp_path, monkeypatch, [0, 1, 2], {"rank": 1, "part": "operator", "factor": 3.0})
    root = _capture(tmp_path)
    assert MSPROF_ANALYZE is not None
    done = subprocess.run(
        [MSPROF_ANALYZE, "cluster", "-d", str(root), "-m", "all"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = root / "cluster_analysis_output" / "cluster_step_trace_time.csv"
    rows = [r for r in csv.DictReader(table.read_text().splitlines()) if r["Type"] == "rank"]
    assert sorted(int(r["Index"]) for r in rows) == [0, 1, 2]
    assert all(float(r["Stage"]) > 0 for r in rows)
    # msprof-analyze's figures and ours agree, and both name rank 1.
    report = analyze(root, advisor=False)
    assert report.slowest is not None and report.slowest.rank == 1
    mine = {r.rank: r.split.computing_us for r in report.ranks if r.split}
    assert {int(r["Index"]): float(r["Computing"]) for r in rows} == pytest.approx(mine, abs=1)


@needs_msprof_analyze
def test_the_report_quotes_the_advisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _host(
        tmp_path,
        monkeypatch,
        [0, 1, 2, 3],
        {"rank": 2, "part": "operator", "factor": 3.0, "operator": "MatMulV2"},
    )
    report = analyze(_capture(tmp_path))
    assert report.advisor_status.startswith("ran: ")
    (verdict,) = [f for f in report.advisor if f.category == "slow rank"]
    assert verdict.description.startswith("Computing has some issues in the cluster")
    assert report.slowest is not None and report.slowest.rank == 2
