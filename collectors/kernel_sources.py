"""Which source gives the kernel's voice, in one documented order, each off with one warning.

``logs.kernel_source`` says where the order starts (``auto`` is ``journal``):

1. ``journal``: ``journalctl -k -o json --follow`` (kernel_journal.py), where ``journalctl``
   is found and can read a journal (with ``auto``: only where journald keeps one, in
   /run/log/journal or /var/log/journal);
2. ``kmsg``: ``logs.kernel_path`` (``/dev/kmsg``) read from a cursor (kernel_log.py);
3. ``files``: /var/log/kern.log and /var/log/messages, followed by the tailer.

The first that can be read is used; each one skipped says why in one warning.
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import Protocol

from ascend_doctor.collectors.kernel_journal import CURSOR_KEY as JOURNAL_CURSOR
from ascend_doctor.collectors.kernel_journal import JournalLog, journal_present, probe
from ascend_doctor.collectors.kernel_log import CURSOR_KEY, KernelLog, fallback_sources
from ascend_doctor.collectors.log_files import Source
from ascend_doctor.core.config import LogsConfig
from ascend_doctor.core.events import LogChunk
from ascend_doctor.core.store import Store

log = logging.getLogger(__name__)

ORDER = ("journal", "kmsg", "files")
"""The sources in the order they are tried."""


class KernelStream(Protocol):
    """A stream of the kernel's lines with a cursor (the journal's or /dev/kmsg's)."""

    lags: bool
    """Whether a line reaches it a moment after the kernel printed it (the journal does)."""

    def open(self) -> bool:
        """Start reading after the cursor; False (one warning) when it cannot."""
        ...

    def poll(self) -> list[LogChunk]:
        """Lines since the last poll, one chunk each."""
        ...

    def commit(self) -> None:
        """Save the cursor."""
        ...

    def close(self) -> None:
        """Release the source."""
        ...


def kernel_source(config: LogsConfig, store: Store) -> tuple[KernelStream | None, list[Source]]:
    """The kernel's stream with its cursor in the store, or (when neither the journal nor
    the record stream can be read) the kernel's log files for the tailer; nothing when
    ``logs.kernel`` is off."""
    if not config.kernel:
        return None, []
    first = "journal" if config.kernel_source == "auto" else config.kernel_source
    for name in ORDER[ORDER.index(first) :]:
        if name == "journal":
            why = _journal_unreadable(config)
            if why is None:
                return JournalLog(
                    lambda: store.meta(JOURNAL_CURSOR),
                    lambda cursor: store.set_meta(JOURNAL_CURSOR, cursor),
                    journalctl=shutil.which(config.journalctl) or config.journalctl,
                    read_from=config.read_from,
                ), []
            if why:  # "" is no journal on this host under auto: nothing to warn about
                log.warning("kernel journal not read (%s): trying %s", why, config.kernel_path)
        elif name == "kmsg":
            if os.access(config.kernel_path, os.R_OK):
                return KernelLog(
                    lambda: store.meta(CURSOR_KEY),
                    lambda cursor: store.set_meta(CURSOR_KEY, cursor),
                    path=config.kernel_path,
                    read_from=config.read_from,
                ), []
            log.warning("kernel log %s is not readable: trying the log files", config.kernel_path)
    files = fallback_sources()
    log.warning(
        "kernel lines: %s",
        f"following {', '.join(s.pattern for s in files)}" if files else "off (nothing readable)",
    )
    return None, files


def _journal_unreadable(config: LogsConfig) -> str | None:
    """Why the journal is not the source (None: it is; '' under ``auto`` without a journal)."""
    binary = shutil.which(config.journalctl)
    if binary is None:
        return "" if config.kernel_source == "auto" else f"{config.journalctl} not found"
    if config.kernel_source == "auto" and not journal_present():
        return ""
    return probe(binary)


__all__ = ["ORDER", "KernelStream", "kernel_source"]
