"""The basic tailer on real files: discovery, rotation, truncation, restart from checkpoints."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ascend_doctor.collectors.logs import Checkpoints, Source, Tailer


class Mem(Checkpoints):
    def __init__(self) -> None:
        self.saved: dict[str, tuple[int, str]] = {}

    def get(self, identity: str) -> tuple[int, str] | None:
        return self.saved.get(identity)

    def put(self, items: list[tuple[str, str, int, str]]) -> None:
        for identity, _path, offset, head in items:
            self.saved[identity] = (offset, head)


@pytest.fixture
def tailer() -> Iterator[Any]:
    made: list[Tailer] = []

    def make(*args: Any, **kw: Any) -> Tailer:
        made.append(Tailer(*args, **kw))
        return made[-1]

    yield make
    for t in made:
        t.close()


def lines(tailer: Tailer) -> list[str]:
    out = []
    for chunk in tailer.poll():
        out.extend(chunk.data.decode().splitlines())
    tailer.commit()
    return out


def test_existing_file_read_from_end_new_file_from_start(tmp_path: Path, tailer: Any) -> None:
    old = tmp_path / "plog-1_1.log"
    old.write_text("before start\n")
    t = tailer([Source(str(tmp_path / "plog-*.log"), "plog")], Mem())
    assert lines(t) == []
    with old.open("a") as f:
        f.write("after start\n")
    new = tmp_path / "plog-2_2.log"
    new.write_text("first line of a new file\n")
    assert lines(t) == ["after start", "first line of a new file"]


def test_partial_line_waits_for_its_newline(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("")
    t = tailer([Source(str(p), "server")], Mem())
    lines(t)
    with p.open("a") as f:
        f.write("half")
    assert lines(t) == []
    with p.open("a") as f:
        f.write(" done\n")
    assert lines(t) == ["half done"]


def test_rename_and_create_reads_the_old_file_to_its_end(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("")
    t = tailer([Source(str(p), "server")], Mem())
    lines(t)
    with p.open("a") as f:
        f.write("one\n")
    assert lines(t) == ["one"]
    with p.open("a") as f:
        f.write("two\nthree\n")  # written, not yet read, when the file is rotated
    os.rename(p, tmp_path / "s.log.1")
    p.write_text("four\n")
    assert lines(t) == ["two", "three", "four"]
    assert t.stats.rotations == 1


def test_truncation_in_place_reads_again_from_start(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("")
    t = tailer([Source(str(p), "server")], Mem())
    lines(t)
    with p.open("a") as f:
        f.write("aaaa\nbbbb\n")
    assert lines(t) == ["aaaa", "bbbb"]
    p.write_text("c\n")
    assert lines(t) == ["c"]
    assert t.stats.truncations == 1


def test_restart_resumes_from_checkpoint(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("")
    mem = Mem()
    t = tailer([Source(str(p), "server")], mem)
    lines(t)
    with p.open("a") as f:
        f.write("seen\n")
    assert lines(t) == ["seen"]
    with p.open("a") as f:
        f.write("written while the doctor was down\n")
    t2 = tailer([Source(str(p), "server")], mem)
    assert lines(t2) == ["written while the doctor was down"]


def test_long_lines_are_cut_and_counted(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("")
    t = tailer([Source(str(p), "server")], Mem(), max_line_bytes=10)
    lines(t)
    with p.open("a") as f:
        f.write("x" * 25 + "\nshort\n")
    assert lines(t) == ["x" * 10, "short"]
    assert t.stats.lines_cut == 1


def test_unreadable_file_is_skipped_with_a_count(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "secret.log"
    p.write_text("x\n")
    t = tailer([Source(str(p), "host")], Mem(), read_from="beginning")
    p.chmod(0)
    try:
        got = lines(t)
    finally:
        p.chmod(0o644)
    if os.geteuid() == 0:  # root reads anyway
        assert got == ["x"]
    else:
        assert got == [] and t.stats.errors == 1


def test_checkpoint_of_a_reused_inode_is_discarded(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("")
    mem = Mem()
    t = tailer([Source(str(p), "server")], mem)
    lines(t)
    with p.open("a") as f:
        f.write("old file line\n")
    assert lines(t) == ["old file line"]
    (identity,) = mem.saved
    offset, head = mem.saved[identity]
    mem.saved[identity] = (offset, head.split(":")[0] + ":0000000000000000")  # another file's
    t2 = tailer([Source(str(p), "server")], mem)
    assert lines(t2) == ["old file line"]
    assert t2.stats.checkpoint_resets == 1


def test_lookback_reads_whole_lines_before_the_end(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("old line one\nold line two\nrecent\n")
    t = tailer([Source(str(p), "server")], Mem(), lookback_bytes=10)
    assert lines(t) == ["recent"]
