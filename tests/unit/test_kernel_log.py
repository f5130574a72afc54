"""The kernel's record stream: dmesg-style lines, a cursor that survives a restart, a new
boot, an unreadable source, lines about processes that are not the server's; and the
finding of an exit nothing explains."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from ascend_doctor.collectors.kernel_log import KernelLog, PidBook
from ascend_doctor.collectors.log_files import last_lines
from ascend_doctor.core.events import Category, ProcessEvent, ProcessState, Role
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules.crash import crash_finding

# Documentation/ABI/testing/dev-kmsg: "<prio>,<seq>,<usec>,<flags>;<message>" and
# continuation lines with a leading space
RECORDS = (
    "6,10,5000000,-;usb 1-1: new high-speed USB device number 2\n"
    " SUBSYSTEM=usb\n"
    " DEVICE=c189:1\n"
    "3,11,81234567890,-;Out of memory: Killed process 4242 (python3) total-vm:812345676kB, "
    "anon-rss:60123456kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:123456kB "
    "oom_score_adj:0\n"
)


class Cursor:
    def __init__(self, value: Any = None) -> None:
        self.value = value

    def load(self) -> Any:
        return self.value

    def save(self, value: dict[str, Any]) -> None:
        self.value = value


def reader(path: Path, cursor: Cursor, boot: str = "b1", read_from: str = "end") -> KernelLog:
    k = KernelLog(cursor.load, cursor.save, path=str(path), read_from=read_from, boot=boot)
    assert k.open()
    return k


def test_records_become_dmesg_lines_the_host_rules_know(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(RECORDS)
    chunks = reader(kmsg, Cursor(), read_from="beginning").poll()
    assert [c.offset for c in chunks] == [10, 11]
    assert chunks[0].data == b"[    5.000000] usb 1-1: new high-speed USB device number 2\n"
    assert chunks[1].file_id == "kmsg:b1" and chunks[1].source == "host"
    engine = Engine(load_rules(), clock=lambda: 0.0)
    (oom,) = engine.scan(chunks[1])
    assert oom.category == Category.HOST_OOM and oom.captures["pid"] == "4242"


def test_the_cursor_means_a_restart_reads_nothing_twice(tmp_path: Path) -> None:
    kmsg, cursor = tmp_path / "kmsg", Cursor()
    kmsg.write_text(RECORDS)
    first = reader(kmsg, cursor, read_from="beginning")
    assert len(first.poll()) == 2
    first.commit()
    first.close()
    assert cursor.value == {"boot": "b1", "seq": 11}
    with open(kmsg, "a") as f:
        f.write(
            "4,12,81234600000,-;python3[4300]: segfault at 0 ip 00007f1c2a3b4c5d sp 0 error 4\n"
        )
    again = reader(kmsg, cursor)
    assert [c.offset for c in again.poll()] == [12]
    # another boot: sequence numbers start over, the cursor means nothing
    assert [c.offset for c in reader(kmsg, cursor, boot="b2").poll()] == [10, 11, 12]


def test_the_very_first_start_reads_from_the_end(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(RECORDS)
    k = reader(kmsg, Cursor())
    assert k.poll() == []
    with open(kmsg, "a") as f:
        f.write("3,12,81234600000,-;Out of memory: Killed process 7 (vllm)\n")
    assert [c.offset for c in k.poll()] == [12]


def test_an_unreadable_source_is_off_not_fatal(tmp_path: Path) -> None:
    k = KernelLog(lambda: None, lambda c: None, path=str(tmp_path / "missing"), boot="b")
    assert not k.open()
    assert k.poll() == []


def test_kernel_lines_about_other_processes_are_dropped(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(RECORDS)
    (chunk,) = reader(kmsg, Cursor(), read_from="beginning").poll()[1:]
    (oom,) = Engine(load_rules(), clock=lambda: 0.0).scan(chunk)
    book = PidBook(clock=lambda: 0.0)
    assert book.about_server(oom), "no server process known yet: nothing to tell it by"
    book.note([999_999_999])  # a pid that does not exist is still remembered as the root
    assert not book.about_server(oom)
    book.pids.add(4242)
    assert book.about_server(oom)
    started = {1, 4242}  # a server started since the last walk: its own pids count at once
    fresh = PidBook(clock=lambda: 0.0, roots=lambda: started)
    fresh.note([999_999_999])
    assert fresh.about_server(oom)
    started.discard(4242)
    assert not PidBook(clock=lambda: 0.0, roots=lambda: started).about_server(oom)


def test_an_unexplained_exit_names_its_signal_and_last_lines(tmp_path: Path) -> None:
    event = ProcessEvent(
        ProcessState.EXITED,
        ProcessState.RUNNING,
        1.0,
        pid=77,
        exit_code=-signal.SIGKILL,
        crashed=True,
        reason="exited with status -9",
    )
    log = tmp_path / "server.log"
    log.write_text("".join(f"INFO line {i}\n" for i in range(100)))
    f = crash_finding(event, last_lines(log, 5), str(log))
    assert f.category == Category.SERVER_CRASHED and f.role == Role.ROOT
    assert f.summary.startswith("The server (pid 77) was killed by SIGKILL")
    assert [e.text for e in f.evidence][1:] == [f"INFO line {i}" for i in range(95, 100)]
    assert [a.name for step in f.remediation for a in step] == ["restart"]
    shell = ProcessEvent(ProcessState.EXITED, ProcessState.RUNNING, 1.0, exit_code=137)
    assert "(SIGKILL)" in crash_finding(shell, []).summary
