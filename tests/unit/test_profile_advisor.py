"""Reading msprof-analyze advisor's output: its terminal table and its page's priorities."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ascend_doctor.collectors.profiling.advisor import (
    advisor_command,
    findings,
    high_priority,
    parse_priorities,
    parse_table,
    run_advisor,
)

ADVISOR = Path(__file__).parents[1] / "fixtures" / "profile" / "advisor"


def test_table_rows_join_their_wrapped_lines() -> None:
    rows = parse_table((ADVISOR / "sim-4rank-slow-matmul.stdout.txt").read_text())
    assert [r[0] for r in rows] == [
        "slow rank",
        "slow link",
        "Packet Analysis",
        "Kernel compare of Rank2 and Rank0",
        "RANK 2 operator dynamic shape issues",
    ]
    assert rows[0][1].startswith("Computing has some issues in the cluster")
    assert "has reached 109.638ms." in rows[0][1]
    assert rows[2][2].startswith("1. data parallelism suggestion")


def test_priorities_come_from_the_section_colours() -> None:
    prio = parse_priorities((ADVISOR / "real-1card-aicpu.html").read_text())
    assert prio == {
        "ai core performance analysis": "low",
        "aicpu issues": "low",
        "operator dynamic shape issues": "low",
        "affinity api issues": "low",
    }


def test_findings_take_the_priority_of_their_section() -> None:
    found = findings(
        (ADVISOR / "sim-4rank-slow-matmul.stdout.txt").read_text(),
        (ADVISOR / "sim-4rank-slow-matmul.html").read_text(),
    )
    by = {f.category: f.priority for f in found}
    assert by["Packet Analysis"] == "low"
    assert by["RANK 2 operator dynamic shape issues"] == "low"
    assert by["slow rank"] == "none"
    # Kept: the advisor's verdict on the cluster; dropped: low-priority advice.
    assert [f.category for f in high_priority(found)] == ["slow rank"]


def test_a_high_priority_section_is_kept() -> None:
    # The real page with its AICPU section coloured as the advisor colours a high priority.
    html = (
        (ADVISOR / "real-1card-aicpu.html")
        .read_text()
        .replace(
            'background-color: #65c294;">AICPU Issues', 'background-color: #B5495B;">AICPU Issues'
        )
    )
    table = (
        "+-----+--------------+-------------------------------+---------------------+\n"
        "| No. | Category     | Description                   | Suggestion          |\n"
        "+-----+--------------+-------------------------------+---------------------+\n"
        "| 1   | AICPU Issues | Some operators and task       | 1. Modify code to   |\n"
        "|     |              | duration exceed 20 us: Cast   | avoid aicpu | ops   |\n"
        "+-----+--------------+-------------------------------+---------------------+\n"
    )
    (kept,) = high_priority(findings(table, html))
    assert kept.priority == "high"
    assert kept.description == "Some operators and task duration exceed 20 us: Cast"
    assert kept.suggestion == "1. Modify code to avoid aicpu | ops"


def test_the_command_is_argv_only() -> None:
    argv = advisor_command("/opt/bin/msprof-analyze", Path("/data/cap; rm -rf x"), Path("/o"))
    assert argv == [
        "/opt/bin/msprof-analyze",
        "advisor",
        "all",
        "-d",
        "/data/cap; rm -rf x",
        "-o",
        "/o",
        "-l",
        "en",
    ]


def test_a_missing_or_failing_advisor_is_a_status_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert run_advisor(tmp_path)[1].startswith("not installed")
    fake = tmp_path / "msprof-analyze"
    fake.write_text("#!/bin/sh\necho 'boom: no profiling data' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    found, status = run_advisor(tmp_path, exe=str(fake))
    assert found == () and status == "failed (exit 3): boom: no profiling data"
    assert os.listdir(tmp_path) == ["msprof-analyze"]  # its scratch output is gone
