"""Files on a hostile host: what the doctor reads and what it writes.

It runs as root beside a production server and reads files other users can create. A log
root may hold a symlink to ``/etc/shadow`` or a FIFO that blocks the first ``open()`` for ever;
a copy of a log in the state dir may hold prompts and secrets. So:

- :func:`open_regular` opens only regular files, never blocking (``O_NONBLOCK``, then
  ``fstat`` says ``S_ISREG``), and follows a symlink only when the file it names lies under one
  of the allowed roots (kubelet's ``/var/log/containers`` links into ``/var/log/pods`` are
  the reason links are followed at all); the last component is opened with ``O_NOFOLLOW``.
- :func:`private_dir` and :func:`write_private` make what the doctor keeps 0700 / 0600,
  whatever the umask.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

FOLLOW_ROOTS: tuple[str, ...] = ("/var/log/pods",)
"""Where a symlinked log may point besides its own directory: kubelet's
``/var/log/containers/*.log`` are links into ``/var/log/pods``."""


class UnsafeFile(OSError):
    """A file the doctor refuses to read: not regular, or a symlink out of its roots."""


def under(path: str, roots: Iterable[str]) -> bool:
    """Whether the real ``path`` lies under the real directory of one of ``roots``."""
    real = os.path.realpath(path)
    for root in roots:
        base = os.path.realpath(root).rstrip("/") + "/"
        if real.startswith(base) or real + "/" == base:
            return True
    return False


def open_regular(path: str | Path, roots: Iterable[str] | None = None) -> BinaryIO:
    """``path`` opened for binary reading, if it is a regular file whose real path lies
    under ``roots`` (default: its own directory and :data:`FOLLOW_ROOTS`); else
    :class:`UnsafeFile`. Never blocks on a FIFO or a device."""
    path = str(path)
    allowed = (os.path.dirname(os.path.abspath(path)), *FOLLOW_ROOTS) if roots is None else roots
    real = os.path.realpath(path)
    if not under(real, allowed):
        raise UnsafeFile(errno.EACCES, "a symlink out of the log roots: not read", path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(real, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeFile(errno.EINVAL, "not a regular file: not read", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def private_dir(path: Path) -> Path:
    """``path`` (and missing parents) created, and ``path`` itself made 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new or truncated ``path``, 0600, never through a symlink."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(fd, 0o600)
        f.write(data)


def open_private_append(path: Path) -> BinaryIO:
    """``path`` opened for appending, 0600, never through a symlink (the server's teed log)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab", buffering=0)  # unbuffered: a full disk fails one write, no more


__all__ = [
    "FOLLOW_ROOTS",
    "UnsafeFile",
    "open_private_append",
    "open_regular",
    "private_dir",
    "under",
    "write_private",
]
