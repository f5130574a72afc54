"""What the doctor follows: the server's output, its CANN log tree, the configured globs,
and where the tailer keeps its checkpoints (the store)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ascend_doctor.collectors.log_files import Checkpoint, Checkpoints, Source, source_kind
from ascend_doctor.core.config import LogsConfig
from ascend_doctor.core.store import Store


class StoreCheckpoints(Checkpoints):
    """The tailer's checkpoints, kept in the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, identity: str) -> Checkpoint | None:
        row = self.store.offset(identity)
        return None if row is None else Checkpoint(*row)

    def by_head(self, head: str) -> Checkpoint | None:
        row = self.store.offset_by_head(head)
        return None if row is None else Checkpoint(*row)

    def put(self, items: list[tuple[str, str, Checkpoint]]) -> None:
        self.store.set_offsets([(i, p, c.offset, c.head, c.file_id) for i, p, c in items])


def cann_log_root(env: Mapping[str, str]) -> Path:
    """Where CANN writes plogs for a process with this environment (FORMATS.md section 1)."""
    for var in ("ASCEND_PROCESS_LOG_PATH", "ASCEND_WORK_PATH"):
        if env.get(var):
            root = Path(env[var])
            return root if var == "ASCEND_PROCESS_LOG_PATH" else root / "log"
    return Path(env.get("HOME", str(Path.home()))) / "ascend" / "log"


def log_sources(
    config: LogsConfig, server_log: Path | None, env: Mapping[str, str]
) -> list[Source]:
    """What to follow: the server's output, its CANN log tree, the configured globs."""
    sources = [Source(str(server_log), "server")] if server_log is not None else []
    if config.cann:
        root = cann_log_root(env)
        for level in ("debug", "run"):
            sources.append(Source(str(root / level / "plog" / "*.log"), "plog"))
            sources.append(Source(str(root / level / "device-*" / "*.log"), "device"))
    for pattern in config.paths:
        sources.append(Source(pattern, source_kind(pattern)))
    return sources


__all__ = ["StoreCheckpoints", "cann_log_root", "log_sources"]
