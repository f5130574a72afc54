"""The fake ``journalctl`` of the simulated host: the kernel's journal entries, as
``journalctl -k -o json [--follow] [--after-cursor C] [--lines N]`` prints them.

The entries are a JSON-lines file beside the host's state (``journal.jsonl``), one entry per
line in the shape journald gives them (:func:`kernel_entry`). What the fake follows:

- ``-k``/``--dmesg``: the kernel's entries of this boot only (journalctl(1): "implies -b and
  adds the match _TRANSPORT=kernel");
- ``-o json``: one JSON object per entry per line (systemd docs/JOURNAL_EXPORT_FORMATS.md,
  "Journal JSON Format"); the only output format here;
- ``--after-cursor C``: entries after the one whose ``__CURSOR`` is C (journalctl(1));
- ``-n N``/``--lines N``: only the last N entries that exist now (``--lines 0``: none);
- ``-f``/``--follow``: then print entries as they are added (:data:`LAG_S` after they were
  written), until killed.

The cursor is journald's text form, ``s=<seqnum id>;i=<seqnum>;b=<boot id>;m=<monotonic>;
t=<realtime>;x=<xor hash>`` (systemd src/libsystemd/sd-journal/sd-journal.c
``sd_journal_get_cursor``), all numbers in hex. Every invocation's argv is appended to
``journalctl.log`` beside the entries, for tests to read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from ascend_doctor.sim.state import STATE_ENV

SEQNUM_ID = "3d7a7c1e5b2f4a0c9e8d6b4a2c0e1f3a"
MACHINE_ID = "0f5c2d8e4b7a41c69e3d2a1b0c9f8e7d"
LAG_S = 0.3
"""Seconds from the kernel's line to journalctl's output of it (journald reads it, then the
follower wakes). No public source gives a figure; 0.3 s is enough that a doctor which does
not wait for the journal decides a crash before the line arrives."""


def journal_path(state: Path) -> Path:
    """The entries of the host whose state file is ``state``."""
    return state.parent / "journal.jsonl"


def kernel_entry(message: str, *, seq: int, usec: int, boot: str) -> dict[str, Any]:
    """One kernel line as journald stores it (systemd.journal-fields(7): ``_TRANSPORT=kernel``,
    ``SYSLOG_IDENTIFIER=kernel``, the kernel's own timestamp in
    ``_SOURCE_MONOTONIC_TIMESTAMP``, journald's in ``__MONOTONIC_TIMESTAMP``)."""
    realtime = int(time.time() * 1e6)
    received = usec + 1200
    boot_hex = boot.replace("-", "")
    xor = zlib.crc32(message.encode()) & 0xFFFFFFFF
    return {
        "__CURSOR": f"s={SEQNUM_ID};i={seq:x};b={boot_hex};m={received:x};t={realtime:x};x={xor:x}",
        "__REALTIME_TIMESTAMP": str(realtime),
        "__MONOTONIC_TIMESTAMP": str(received),
        "__SEQNUM": str(seq),
        "__SEQNUM_ID": SEQNUM_ID,
        "_BOOT_ID": boot_hex,
        "_MACHINE_ID": MACHINE_ID,
        "_HOSTNAME": "atlas-800t-a2",
        "_TRANSPORT": "kernel",
        "PRIORITY": "3",
        "SYSLOG_FACILITY": "0",
        "SYSLOG_IDENTIFIER": "kernel",
        "_SOURCE_MONOTONIC_TIMESTAMP": str(usec),
        "MESSAGE": message,
    }


def append(state: Path, entry: dict[str, Any]) -> None:
    """Add ``entry`` to the host's journal (as journald would, the moment the line is read)."""
    with open(journal_path(state), "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def _this_boot() -> str:
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
        return f.read().strip().replace("-", "")


def _kernel(line: str, boot: str) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    ok = entry.get("_TRANSPORT") == "kernel" and entry.get("_BOOT_ID") == boot
    return entry if ok else None


def main(argv: list[str] | None = None) -> int:
    """Print the kernel's entries, then (``--follow``) those added later."""
    p = argparse.ArgumentParser(prog="journalctl")
    p.add_argument("-k", "--dmesg", action="store_true")
    p.add_argument("-o", "--output", default="short")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("-n", "--lines", type=int, default=None)
    p.add_argument("--after-cursor", default=None)
    p.add_argument("--no-pager", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    path = journal_path(Path(os.environ[STATE_ENV]))
    with open(path.with_name("journalctl.log"), "a", encoding="utf-8") as f:
        f.write(json.dumps(sys.argv[1:] if argv is None else argv) + "\n")
    if not args.dmesg or args.output != "json":
        print("the simulated journalctl prints only -k -o json", file=sys.stderr)
        return 1
    boot = _this_boot()
    path.touch()
    with open(path, encoding="utf-8") as f:
        entries = [e for line in f if (e := _kernel(line, boot)) is not None]
        if args.after_cursor is not None:
            cursors = [e["__CURSOR"] for e in entries]
            if args.after_cursor in cursors:
                entries = entries[cursors.index(args.after_cursor) + 1 :]
        if args.lines is not None:
            entries = entries[-args.lines :] if args.lines else []
        for e in entries:
            sys.stdout.write(json.dumps(e, separators=(",", ":")) + "\n")
        sys.stdout.flush()
        held = ""
        while args.follow:
            held += f.readline()
            if not held.endswith("\n"):
                time.sleep(0.05)  # a writer's line not yet whole, or nothing new
                continue
            entry, held = _kernel(held, boot), ""
            if entry is not None:
                # journald reads the kernel's line, then this follower wakes: a moment later
                written = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
                time.sleep(max(0.0, written + LAG_S - time.time()))
                sys.stdout.write(json.dumps(entry, separators=(",", ":")) + "\n")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
