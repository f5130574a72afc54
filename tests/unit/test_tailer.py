"""The basic tailer on real files: discovery, rotation, truncation, restart from checkpoints."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ascend_doctor.collectors.logs import Checkpoint, Checkpoints, Source, Tailer


class Mem(Checkpoints):
    def __init__(self) -> None:
        self.saved: dict[str, Checkpoint] = {}

    def get(self, identity: str) -> Checkpoint | None:
        return self.saved.get(identity)

    def by_head(self, head: str) -> Checkpoint | None:
        return next((c for c in self.saved.values() if c.head == head), None)

    def put(self, items: list[tuple[str, str, Checkpoint]]) -> None:
        for identity, _path, checkpoint in items:
            self.saved[identity] = checkpoint


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
    t2 = tailer([Source(str(p), "server")], mem, first_start=False)
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
    saved = mem.saved[identity]
    other = saved.head.split(":")[0] + ":0000000000000000"  # another file's first bytes
    mem.saved[identity] = Checkpoint(saved.offset, other, saved.file_id)
    t2 = tailer([Source(str(p), "server")], mem, first_start=False)
    assert lines(t2) == ["old file line"]
    assert t2.stats.checkpoint_resets == 1


def test_lookback_reads_whole_lines_before_the_end(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("old line one\nold line two\nrecent\n")
    t = tailer([Source(str(p), "server")], Mem(), lookback_bytes=10)
    assert lines(t) == ["recent"]


def chunks_of(t: Tailer) -> list[tuple[str, int, str]]:
    out = []
    for c in t.poll():
        for i, line in enumerate(c.data.decode("utf-8", "replace").splitlines()):
            out.append((c.file_id, i, line))
    t.commit()
    return out


HEADER = "2026-12-02 12:00:00 server starting, this header makes the first 256 bytes unique " * 4


def test_copytruncate_reads_the_unread_tail_from_the_copy_once(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "app.log"
    p.write_text(HEADER + "\n")
    t = tailer([Source(str(tmp_path / "app.log*"), "server")], Mem())
    lines(t)
    with p.open("a") as f:
        f.write("one\n")
    assert lines(t) == ["one"]
    with p.open("a") as f:
        f.write("two\nthree\n")  # not read yet when logrotate copies and truncates
    shutil.copyfile(p, tmp_path / "app.log.1")
    os.truncate(p, 0)
    with p.open("a") as f:
        f.write("four\n")
    assert sorted(lines(t)) == ["four", "three", "two"]
    assert t.stats.copies_continued == 1 and t.stats.truncations == 1
    assert lines(t) == []


def test_copytruncate_copy_seen_before_the_truncation(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "app.log"
    p.write_text(HEADER + "\n")
    t = tailer([Source(str(tmp_path / "app.log*"), "server")], Mem())
    lines(t)
    with p.open("a") as f:
        f.write("two\n")
    shutil.copyfile(p, tmp_path / "app.log.1")
    # the copy and the not-yet-truncated original both hold "two": it is read once
    assert [line for _, _, line in chunks_of(t)] == ["two"]
    os.truncate(p, 0)
    with p.open("a") as f:
        f.write("three\n")
    assert lines(t) == ["three"]


def test_rename_into_a_followed_name_is_not_read_twice(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "app.log"
    p.write_text("")
    t = tailer([Source(str(tmp_path / "app.log*"), "server")], Mem())
    lines(t)
    with p.open("a") as f:
        f.write("a\nb\n")
    os.rename(p, tmp_path / "app.log.1")
    p.write_text("c\n")
    assert lines(t) == ["a", "b", "c"]
    with (tmp_path / "app.log.1").open("a") as f:
        f.write("late line of the rotated file\n")
    assert lines(t) == ["late line of the rotated file"]


def test_delete_and_recreate(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("")
    t = tailer([Source(str(p), "server")], Mem())
    lines(t)
    with p.open("a") as f:
        f.write("before delete\n")
    p.unlink()
    p.write_text("after recreate\n")
    assert lines(t) == ["before delete", "after recreate"]


def test_symlink_switched_to_a_new_target(tmp_path: Path, tailer: Any) -> None:
    a, b, link = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "current.log"
    a.write_text("")
    b.write_text("")
    link.symlink_to(a)
    t = tailer([Source(str(link), "server")], Mem())
    lines(t)
    with a.open("a") as f:
        f.write("from a\n")
    link.unlink()
    link.symlink_to(b)
    with b.open("a") as f:
        f.write("from b\n")
    assert lines(t) == ["from a", "from b"]


def test_unknown_files_at_a_restart_are_read_from_the_start(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "new.log"
    p.write_text("written while the doctor was down\n")
    t = tailer([Source(str(tmp_path / "*.log"), "server")], Mem(), first_start=False)
    assert lines(t) == ["written while the doctor was down"]


def test_binary_files_are_skipped(tmp_path: Path, tailer: Any) -> None:
    (tmp_path / "core.log").write_bytes(b"ELF\0\0\0binary")
    (tmp_path / "ok.log").write_text("fine\n")
    t = tailer([Source(str(tmp_path / "*.log"), "server")], Mem(), read_from="beginning")
    assert lines(t) == ["fine"]
    assert t.stats.binary_skipped == 1
    assert lines(t) == []  # not retried
    assert t.stats.binary_skipped == 1


def test_invalid_utf8_passes_through(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("")
    t = tailer([Source(str(p), "server")], Mem())
    lines(t)
    with p.open("ab") as f:
        f.write(b"bad \xff\xfe bytes\nnext\n")
    (chunk,) = t.poll()
    assert chunk.data == b"bad \xff\xfe bytes\nnext\n"


def test_vanished_file_is_finished_and_released(tmp_path: Path, tailer: Any) -> None:
    p = tmp_path / "s.log"
    p.write_text("")
    t = tailer([Source(str(tmp_path / "*.log"), "server")], Mem())
    lines(t)
    with p.open("a") as f:
        f.write("last words\n")
    p.unlink()
    assert lines(t) == ["last words"]
    assert t.paths() == []


def test_unopenable_file_is_reported_with_path_and_reason(
    tmp_path: Path, tailer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # EACCES cannot be produced for root (CI runs as root): a directory named like a log
    # takes the same path through the tailer (open fails with an OS error and its reason)
    (tmp_path / "ok.log").write_text("fine\n")
    (tmp_path / "weird.log").mkdir()
    t = tailer([Source(str(tmp_path / "*.log"), "host")], Mem(), read_from="beginning")
    assert lines(t) == ["fine"]
    assert lines(t) == []
    assert t.stats.errors == 2  # tried again each pass, reported once
    reports = [r.getMessage() for r in caplog.records if "weird.log" in r.getMessage()]
    assert reports == [f"{tmp_path / 'weird.log'}: not a regular file: not read; skipping it"]


def test_a_pass_without_names_reads_followed_files_only(tmp_path: Path, tailer: Any) -> None:
    """Inotify said only contents changed: no glob, the files followed are still read."""
    old = tmp_path / "a.log"
    old.write_text("")
    t = tailer([Source(str(tmp_path / "*.log"), "server")], Mem())
    assert lines(t) == []
    with old.open("a") as f:
        f.write("appended\n")
    (tmp_path / "b.log").write_text("in a new file\n")
    assert [c.data for c in t.poll(names=False)] == [b"appended\n"]
    assert not t.more
    assert [c.data for c in t.poll()] == [b"in a new file\n"]


def test_a_read_that_fills_its_limit_asks_for_another_pass(tmp_path: Path, tailer: Any) -> None:
    from ascend_doctor.collectors.log_files import READ_BYTES

    path = tmp_path / "a.log"
    path.write_text("")
    t = tailer([Source(str(path), "server")], Mem())
    lines(t)
    path.write_bytes(b"x" * 99 + b"\n" + b"y\n" * READ_BYTES)
    t.poll(names=False)
    assert t.more
    t.poll(names=False)
    t.poll(names=False)
    assert not t.more


def test_waker_wakes_once_per_burst_and_tells_new_names() -> None:
    from ascend_doctor.collectors.inotify import Waker

    wakes: list[int] = []
    waker = Waker(lambda: wakes.append(1))
    for _ in range(16):
        waker._event("modified")
    assert len(wakes) == 1
    assert waker.taken() is False  # contents only: no glob needed
    waker._event("modified")
    waker._event("created")
    assert len(wakes) == 2
    assert waker.taken() is True
    assert waker.taken() is False
