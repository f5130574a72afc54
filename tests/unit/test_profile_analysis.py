"""The analysis of a capture on real published layouts and on hand-made edge cases."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ascend_doctor.collectors.profiling import analyze, render_text
from ascend_doctor.collectors.profiling.analyze import build_report, load
from ascend_doctor.collectors.profiling.parse import (
    collective_type,
    parse_communication,
    parse_kernel_details,
    parse_op_statistic,
    parse_step_trace_time,
    parse_trace,
)

PROFILE = Path(__file__).parents[1] / "fixtures" / "profile"
STEP_HEADER = (
    "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,"
    "Stage,Bubble,Communication(Not Overlapped and Exclude Receive),Preparing"
)


def test_step_trace_time_sums_steps_per_device() -> None:
    text = (
        f"{STEP_HEADER}\n"
        "0,1,200.0,80.0,20.0,100.0,720.0,1000.0,0,80.0,5.0\n"
        "0,2,300.0,20.0,0.0,20.0,680.0,1000.0,0,20.0,5.0\n"
        "1,1,100.0,10.0,0.0,10.0,10.0,120.0,0,10.0,1.0\n"
    )
    splits = parse_step_trace_time(text)
    assert splits[0].steps == 2 and splits[0].computing_us == 500.0
    assert splits[0].communication_not_overlapped_us == 100.0 and splits[0].free_us == 1400.0
    assert splits[0].overlapped_us == 20.0 and splits[0].per_step_us == 1000.0
    assert splits[1].total_us == 120.0


def test_step_trace_time_of_an_older_release_has_fewer_columns() -> None:
    # torch_npu before the Bubble/Preparing columns; a schedule-less capture leaves Step empty
    text = (
        "Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,"
        "Free,Stage\n1,,200,100,50,150,650,1000\n"
    )
    split = parse_step_trace_time(text)[1]
    assert (split.computing_us, split.free_us, split.overlapped_us) == (200.0, 650.0, 50.0)


def test_a_csv_without_the_needed_columns_says_which() -> None:
    with pytest.raises(ValueError, match="expected columns Computing"):
        parse_step_trace_time("Device_id,Step,Foo\n0,1,2\n")


def test_real_one_card_timeline_gives_split_operators_and_copies() -> None:
    report = analyze(PROFILE / "torch-npu-1card-timeline", advisor=False)
    (rank,) = report.ranks
    assert rank.rank == 0 and rank.layout == "torch_npu"
    assert rank.split is not None and rank.split.source == "trace_view.json"
    assert rank.split.computing_us == pytest.approx(91.8785)
    assert rank.split.free_us == pytest.approx(1841.862)
    assert rank.split.communication_not_overlapped_us == 0.0
    assert rank.top_operators[0].name == "Conv2D1"
    assert rank.top_operators[0].total_us == pytest.approx(22.599, abs=1e-3)
    assert rank.copies is not None and rank.copies.host_blocking_count == 4
    assert rank.copies.host_blocking_us == pytest.approx(199.872, abs=1e-3)
    assert rank.copies.share == pytest.approx(199.872 / (91.8785 + 1841.862), abs=1e-4)
    assert report.slowest is None and "free 95%" in report.headline


def test_real_kernel_details_gives_top_operators_without_a_split() -> None:
    report = analyze(PROFILE / "torch-npu-kernel-details", advisor=False)
    (rank,) = report.ranks
    assert rank.split is None and "no step time" in report.headline
    top = rank.top_operators[0]
    assert (top.name, top.core, top.count) == ("MatMulV3", "AI_CORE", 8)
    assert top.total_us == pytest.approx(4122.342, abs=1e-3)
    assert sum(o.share for o in rank.top_operators) == pytest.approx(1.0)


def test_real_cluster_output_names_the_rank_the_others_wait_for() -> None:
    report = analyze(PROFILE / "msprof-analyze-cluster-8rank", advisor=False)
    assert [r.rank for r in report.ranks] == list(range(8))
    slow = report.slowest
    assert slow is not None and slow.rank == 1 and slow.part == "free"
    # rank 1: computing 80435.7 + free 1488610.1; the median of the others' own time
    assert slow.own_us == pytest.approx(80435.7465 + 1488610.05875)
    assert slow.gap_share == pytest.approx(0.3178, abs=1e-3)
    assert report.headline.startswith("rank 1 is the slow rank: 378.38 ms over the capture")


def test_text_and_json_carry_the_same_figures() -> None:
    report = analyze(PROFILE / "msprof-analyze-cluster-8rank", advisor=False)
    text = render_text(report)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["slowest"]["rank"] == 1 and data["headline"] in text
    r5 = data["ranks"][5]["split"]
    assert f"{r5['communication_not_overlapped_us'] / 1000:8.2f} ms" in text
    assert r5["total_us"] == pytest.approx(81367.62 + 756374.86 + 892836.9, abs=0.01)
    assert "<- slow" in text.splitlines()[6]
    assert "waits for its host" in text.splitlines()[2]  # the slow part was free time


def test_a_broken_file_is_a_problem_and_the_rest_is_still_read(tmp_path: Path) -> None:
    out = tmp_path / "h_1_20260101000000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "step_trace_time.csv").write_text(f"{STEP_HEADER}\n0,,10,0,0,0,90,100,0,0,0\n")
    (out / "trace_view.json").write_text('[{"ph": "X", "name": ')
    (out / "op_statistic.csv").write_text("nothing,useful\n1,2\n")
    report = build_report(str(tmp_path), *load(tmp_path)[:2])
    (rank,) = report.ranks
    assert rank.split is not None and rank.split.free_us == 90.0
    assert any("trace_view.json: timeline: not JSON" in p for p in report.problems)
    assert any(
        "op_statistic.csv: op_statistic.csv: expected columns OP Type" in p for p in report.problems
    )
    assert "problems:" in render_text(report)


def test_symlinked_files_are_not_followed(tmp_path: Path) -> None:
    out = tmp_path / "h_1_20260101000000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    secret = tmp_path / "secret.csv"
    secret.write_text(f"{STEP_HEADER}\n0,,10,0,0,0,90,100,0,0,0\n")
    os.symlink(secret, out / "step_trace_time.csv")
    report = analyze(tmp_path, advisor=False)
    assert report.ranks[0].split is None
    assert any("not a regular file" in p for p in report.problems)


def test_an_empty_directory_says_no_capture(tmp_path: Path) -> None:
    report = analyze(tmp_path, advisor=False)
    assert report.ranks == () and "no capture found" in report.problems[0]


def test_communication_json_is_summed_per_collective_type() -> None:
    info = {
        "Communication Time Info": {
            "Elapse Time(ms)": 1.5,
            "Wait Time(ms)": 1.0,
            "Transit Time(ms)": 0.5,
        },
    }
    text = json.dumps(
        {
            "step": {
                "collective": {
                    "hcom_allReduce__674_0_1@8803796580339245440": info,
                    "hcom_allReduce__674_1_1@8803796580339245440": info,
                    "Total Op Info": info,
                },
                "p2p": {},
            }
        }
    )
    (coll,) = parse_communication(text)
    assert (coll.name, coll.count) == ("hcom_allReduce", 2)
    assert (coll.elapse_us, coll.wait_us, coll.transit_us) == (3000.0, 2000.0, 1000.0)
    assert collective_type("hcom_broadcast__501_0@6297232067196334501") == "hcom_broadcast"


def test_op_summary_and_op_statistic_of_msprof_read_like_torch_npu_files() -> None:
    summary = (
        "Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,"
        "Task Start Time(us),Task Duration(us),Task Wait Time(us),Block Num\n"
        "0,4294967295,1,2,aclnnMatmul_MatMulV2,MatMulV2,dynamic,AI_CORE,10\t,30.0,0,24\n"
        "0,4294967295,2,2,aclnnAdd_Add,N/A,N/A,N/A,50\t,10.0,0,0\n"
    )
    ops = parse_kernel_details(summary)[0]
    assert [(o.name, o.count, o.total_us) for o in ops] == [
        ("MatMulV2", 1, 30.0),
        ("aclnnAdd_Add", 1, 10.0),
    ]  # task_time=l0 leaves no type
    stats = parse_op_statistic(
        "Device_id,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),"
        "Max Time(us),Ratio(%)\n0,Cast,AI_CPU,7,785.18,100,112,130,100\n"
    )
    assert stats[0][0].share == 1.0 and stats[0][0].count == 7


def test_a_timeline_with_several_devices_is_split_by_npu_label() -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Overlap Analysis"}},
        {"ph": "M", "name": "process_labels", "pid": 1, "args": {"labels": "NPU 3"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "Overlap Analysis"}},
        {"ph": "M", "name": "process_labels", "pid": 2, "args": {"labels": "NPU 5"}},
        {"ph": "X", "name": "Computing", "pid": 1, "ts": "1.0", "dur": 4},
        {"ph": "X", "name": "Free", "pid": 2, "ts": "1.0", "dur": "6.5"},
    ]
    facts = parse_trace(json.dumps(events))
    assert sorted(facts) == [3, 5]
    assert facts[3].overlap["Computing"] == 4.0 and facts[5].overlap["Free"] == 6.5
