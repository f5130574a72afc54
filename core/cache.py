"""An on-disk cache of derived data (compiled pattern databases, parsed rule packs).

Every entry can be rebuilt from the inputs its key is made of, so the cache can only make a
start faster, never change what it computes: a read that fails for any reason (no directory,
no permission, a truncated, corrupt or foreign file) is a miss, and a write that fails is
skipped. Each file holds a magic, the SHA-256 of its payload and the payload; a payload whose
digest does not match is never handed to a decoder. Entries are keyed by content, so a change
of the inputs is a new key; the oldest entries of a namespace beyond ``KEEP`` are removed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "ASCEND_DOCTOR_CACHE_DIR"
"""Overrides where the cache lives; empty or ``off`` turns it off."""
MAGIC = b"ADCACHE1"
KEEP = 16
"""Entries kept per namespace by default (old pack versions, other library versions)."""
MAX_BYTES = 256 << 20
"""A larger file is not read (it cannot be one of ours)."""
_DIGEST = 32


def cache_dir() -> Path | None:
    """``$ASCEND_DOCTOR_CACHE_DIR``; else ``/var/cache/ascend-doctor`` as root, else
    ``$XDG_CACHE_HOME/ascend-doctor`` (``~/.cache/ascend-doctor``). None: turned off."""
    value = os.environ.get(ENV)
    if value is not None:
        return Path(value) if value.strip() not in ("", "off") else None
    if os.geteuid() == 0:
        return Path("/var/cache/ascend-doctor")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ascend-doctor"


def key_of(*parts: str | bytes) -> str:
    """A key naming exactly these inputs (each part length-prefixed: no two lists collide)."""
    h = hashlib.sha256()
    for part in parts:
        raw = part.encode("utf-8") if isinstance(part, str) else part
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h.hexdigest()


def _path(namespace: str, key: str) -> Path | None:
    root = cache_dir()
    return None if root is None else root / namespace / f"{key}.bin"


def read(namespace: str, key: str) -> bytes | None:
    """The payload stored under ``key``, or None (a miss, whatever the reason)."""
    path = _path(namespace, key)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError:
        return None
    head = len(MAGIC) + _DIGEST
    if len(raw) > MAX_BYTES or len(raw) < head or not raw.startswith(MAGIC):
        log.debug("cache: %s is not a cache file; ignored", path)
        return None
    payload = raw[head:]
    if hashlib.sha256(payload).digest() != raw[len(MAGIC) : head]:
        log.debug("cache: %s is corrupt; ignored", path)
        return None
    return payload


def write(namespace: str, key: str, payload: bytes, *, keep: int = KEEP) -> None:
    """Store ``payload`` under ``key`` atomically, keeping the ``keep`` newest entries of the
    namespace; any failure is logged and skipped."""
    path = _path(namespace, key)
    if path is None or len(payload) > MAX_BYTES - len(MAGIC) - _DIGEST:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".bin")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(path.parent, keep)
    except OSError as exc:
        log.debug("cache: cannot write %s: %s", path, exc)


def _prune(folder: Path, keep: int) -> None:
    entries = []
    for p in folder.glob("*.bin"):
        try:
            entries.append((p.stat().st_mtime, p))
        except OSError:
            continue
    for _, p in sorted(entries, reverse=True)[keep:]:
        try:
            p.unlink()
        except OSError:
            continue


__all__ = ["ENV", "KEEP", "cache_dir", "key_of", "read", "write"]
