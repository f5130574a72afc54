"""A store the daemon cannot write at start-up: supervision goes on in memory.

A state dir on a file system remounted read-only after errors, an immutable store file, a
full disk: the daemon's store then lives in memory, seeded from what the file on disk still
says (the server a dead doctor left running, an action it died in), so the doctor starts
and supervises the server as ever. What it writes meanwhile is counted (``write_errors``,
logged once a minute, as every failed write is) and written back, whole, at the first
chance the file can be written again (tried on a write, every few seconds at most: one
failed ``open()``): SQLite's online backup copies the memory into the file in one step.

Only a memory seeded from the file (or a state dir with no store yet) is written back: a
store that could not be read at all is never overwritten by an empty one.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

from ascend_doctor.core.store_schema import migrate

log = logging.getLogger("ascend_doctor.core.store")


def open_in_memory(path: Path) -> tuple[sqlite3.Connection, bool]:
    """An in-memory store holding what ``path`` holds (if it can be read), at the current
    schema; and whether it may be written back over ``path`` (seeded from it, or no store
    there yet)."""
    mem = sqlite3.connect(":memory:", isolation_level=None)
    seeded = not path.exists()
    # mode=ro reads a WAL store's log too, but needs its -shm: a read-only file system with
    # no -shm left (the last doctor closed cleanly) can only be read as immutable
    for query in ("mode=ro", "mode=ro&immutable=1"):
        if seeded:
            break
        try:
            src = sqlite3.connect(f"file:{path}?{query}", uri=True, timeout=5.0)
            try:
                src.execute("PRAGMA user_version").fetchone()
                src.backup(mem)
                seeded = True
            finally:
                src.close()
        except sqlite3.Error as exc:
            log.debug("reading %s (%s) for the memory store failed: %s", path, query, exc)
    migrate(mem)
    return mem, seeded


def write_back(mem: sqlite3.Connection, path: Path) -> sqlite3.Connection | None:
    """The store on disk at ``path`` holding everything ``mem`` holds, as the new writable
    connection; None while ``path`` still cannot be written."""
    try:
        if path.exists():
            with open(path, "r+b"):  # a read-only mount, an immutable file: nothing to try
                pass
        disk = sqlite3.connect(path, timeout=5.0, isolation_level=None)
    except (OSError, sqlite3.Error):
        return None
    try:
        disk.execute("PRAGMA journal_mode=DELETE")  # backup needs matching page sizes only
        mem.backup(disk)
        disk.execute("PRAGMA journal_mode=WAL")
        disk.execute("PRAGMA synchronous=NORMAL")
        for part in (path, *(path.with_name(path.name + x) for x in ("-wal", "-shm"))):
            if part.exists():
                os.chmod(part, 0o600)
    except (OSError, sqlite3.Error) as exc:
        disk.close()
        log.debug("writing the memory store back to %s failed: %s", path, exc)
        return None
    return disk


__all__ = ["open_in_memory", "write_back"]
