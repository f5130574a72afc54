"""``tui --store BUNDLE.tar.gz``: a support bundle's store rebuilt and read by the TUI."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ascend_doctor.cli.bundle import bundle
from ascend_doctor.cli.bundle_store import is_bundle, store_from_bundle
from ascend_doctor.core.errors import DoctorError
from ascend_doctor.tui.app import DoctorApp
from ascend_doctor.tui.data import Source, load_incident, load_overview
from ascend_doctor.tui.screens import OverviewScreen
from ascend_doctor.tui.widgets import IncidentsTable
from tests.tui.conftest import shown
from tests.tui.store_fixture import LOG_LINES, NOW, build_state


def make_bundle(state: Path, out: Path, *args: str) -> Path:
    result = CliRunner().invoke(
        bundle, ["--state-dir", str(state), "-o", str(out), *args], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return out


def test_bundle_store_has_the_incidents_decisions_and_evidence(state: Path, tmp_path: Path) -> None:
    out = make_bundle(state, tmp_path / "b.tar.gz")
    assert is_bundle(out) and not is_bundle(state / "doctor.db")
    work = tmp_path / "unpacked"
    db = store_from_bundle(out, work)
    source = Source(db, work)
    view = load_overview(source, lambda pid: True)
    assert not view.header.doctor_alive  # that doctor is not this host's
    assert sorted((i.id, i.state) for i in view.incidents) == [
        (1, "resolved"),
        (2, "escalated"),
        (3, "open"),
    ]
    assert len(view.devices) == 8
    assert view.log_path.endswith("server.log") and Path(view.log_path).is_relative_to(work)
    assert [ln.severity for ln in view.log_lines if ln.severity] == [40, 30, 20]
    detail = load_incident(source, 1)
    assert [a.name for a in detail.actions] == ["set_env", "restart"]
    (root,) = detail.roots
    assert root.evidence[0].line == 3


def test_a_log_cut_to_its_tail_keeps_its_matched_lines(tmp_path: Path) -> None:
    filler = [f"(APIServer pid=728) INFO filler line {i:06d}" for i in range(40_000)]
    state = build_state(tmp_path / "state", log_lines=filler + LOG_LINES, first=len(filler))
    out = make_bundle(state, tmp_path / "b.tar.gz", "--max-log-mb", "0.5")
    work = tmp_path / "unpacked"
    db = store_from_bundle(out, work)
    source = Source(db, work)
    view = load_overview(source, lambda pid: False)
    assert view.log_lines[-1].text == LOG_LINES[-1]
    assert [ln.severity for ln in view.log_lines if ln.severity] == [40, 30, 20]
    (root,) = load_incident(source, 1).roots
    ev = root.evidence[0]
    # the line number is the line's in the unpacked tail, the file the TUI shows
    unpacked = (work / ev.path).read_text().splitlines()
    assert unpacked[ev.line - 1] == LOG_LINES[2]


def test_not_a_bundle(tmp_path: Path) -> None:
    import tarfile

    tar = tmp_path / "x.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        t.add(__file__, arcname="top/file.py")
    with pytest.raises(DoctorError, match="not a support bundle"):
        store_from_bundle(tar, tmp_path / "out")


async def test_tui_on_a_rebuilt_bundle(state: Path, tmp_path: Path) -> None:
    out = make_bundle(state, tmp_path / "b.tar.gz")
    db = store_from_bundle(out, tmp_path / "unpacked")
    app = DoctorApp(Source(db, tmp_path / "unpacked"), clock=lambda: NOW, alive=lambda p: True)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await shown(pilot, OverviewScreen)
        assert screen.query_one(IncidentsTable).row_count == 3
