"""The journal as the kernel's source: journald's JSON entries (systemd
docs/JOURNAL_EXPORT_FORMATS.md, "Journal JSON Format": strings, a non-UTF-8 field as an array
of byte values, a field too large to show as null) become dmesg-style lines; the source order
journal -> kmsg -> files, each skipped with one warning."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from ascend_doctor.collectors.kernel_journal import JournalLog, probe
from ascend_doctor.collectors.kernel_log import KernelLog
from ascend_doctor.collectors.kernel_sources import kernel_source
from ascend_doctor.core.config import LogsConfig
from ascend_doctor.core.store import Store
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.sim.journalctl import kernel_entry

BOOT = "6c7c6013a8264ed7bbfb6a0f8de8a5ac"


def _reader(cursor: list[Any]) -> JournalLog:
    return JournalLog(lambda: cursor[0], lambda c: cursor.__setitem__(0, c), boot=BOOT)


def _line(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def test_entries_become_dmesg_lines_the_host_rules_know() -> None:
    cursor: list[Any] = [None]
    j = _reader(cursor)
    oom = kernel_entry(
        "Out of memory: Killed process 4242 (python3) total-vm:812345676kB, anon-rss:60123456kB,"
        " file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:123456kB oom_score_adj:0",
        seq=7,
        usec=81234567890,
        boot=BOOT,
    )
    binary = {**kernel_entry("x", seq=8, usec=81234567999, boot=BOOT), "MESSAGE": [104, 105, 255]}
    big = {**kernel_entry("x", seq=9, usec=81234568000, boot=BOOT), "MESSAGE": None}
    data = b"".join(_line(e) for e in (oom, binary, big)) + b"not json\n" + _line(oom)[:20]
    chunks = list(j._entries(data))
    assert [c.data for c in chunks] == [
        b"[81234.567890] " + oom["MESSAGE"].encode() + b"\n",
        b"[81234.567999] hi\xff\n",
    ]
    assert [c.offset for c in chunks] == [7, 8] and j.lost == 1
    assert chunks[0].file_id == f"journal:{BOOT}" and chunks[0].source == "host"
    j.commit()
    assert cursor[0] == {"boot": BOOT, "cursor": big["__CURSOR"]}  # read, though not shown
    (finding,) = Engine(load_rules(), clock=lambda: 0.0).scan(chunks[0])
    assert finding.category.value == "host_oom" and finding.captures["pid"] == "4242"


def test_without_seqnum_offsets_still_grow() -> None:
    j = _reader([None])
    entries = [kernel_entry(m, seq=1, usec=5, boot=BOOT) for m in ("a", "b")]
    for e in entries:
        del e["__SEQNUM"]  # before systemd 254
    assert [c.offset for c in j._entries(b"".join(map(_line, entries)))] == [
        5,
        6,
    ]  # the kernel's time, kept growing


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (None, ["--lines", "0"]),
        ({"boot": BOOT, "cursor": "s=a;i=2"}, ["--after-cursor", "s=a;i=2"]),
        ({"boot": "another boot", "cursor": "s=a;i=2"}, ["--no-pager"]),  # -k: this boot
    ],
)
def test_the_argv_starts_after_the_cursor_of_this_boot(stored: Any, expected: list[str]) -> None:
    argv = _reader([stored]).argv()
    assert argv[:6] == ["journalctl", "-k", "-o", "json", "--follow", "--no-pager"]
    assert argv[-len(expected) :] == expected


def _fake(tmp_path: Path, stderr: str, rc: int = 0) -> str:
    script = tmp_path / "journalctl"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stderr.write({stderr!r})\nsys.exit({rc})\n"
    )
    script.chmod(0o755)
    return str(script)


def test_the_probe_says_why_the_journal_cannot_be_read(tmp_path: Path) -> None:
    assert probe(_fake(tmp_path, "")) is None
    assert "No journal files" in (probe(_fake(tmp_path, "No journal files were found.\n")) or "")
    assert "exited 1" in (probe(_fake(tmp_path, "Failed to open\n", 1)) or "")
    assert "No such file" in (probe(str(tmp_path / "missing")) or "")


def test_the_sources_give_way_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.in_dir(tmp_path / "state")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no journalctl anywhere
    caplog.set_level(logging.WARNING)
    cfg = LogsConfig(kernel_source="journal", journalctl="journalctl", kernel_path=str(kmsg))
    stream, files = kernel_source(cfg, store)
    assert isinstance(stream, KernelLog) and files == []
    assert "journalctl not found" in caplog.text
    caplog.clear()
    cfg = LogsConfig(kernel_source="auto", kernel_path=str(kmsg))
    stream, _ = kernel_source(cfg, store)
    assert isinstance(stream, KernelLog) and caplog.text == ""  # auto without a journal: quiet
    fake = _fake(tmp_path, "")
    stream, _ = kernel_source(LogsConfig(kernel_source="journal", journalctl=fake), store)
    assert isinstance(stream, JournalLog) and stream.journalctl == fake
    cfg = LogsConfig(kernel_source="kmsg", kernel_path=str(tmp_path / "none"))
    stream, _ = kernel_source(cfg, store)
    assert stream is None and "not readable" in caplog.text
    store.close()
