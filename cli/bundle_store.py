"""A store rebuilt from a support bundle, so ``ascend-doctor tui --store BUNDLE.tar.gz`` shows
what the bundle holds post-mortem.

A bundle keeps the store's state as JSON (``store/*.json``) and the tail of each log under
``logs/``. This unpacks the logs into a new dir and writes a fresh store there through the
store's own API: incidents with their findings and decisions (ids renumbered, links kept),
supervisor events, the newest samples, overrides and meta. Evidence paths point at the
unpacked logs; when a log was cut to its tail, offsets are moved by what was cut, so
matched lines are still found. The bundle holds no spans: incidents have no waterfall.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.events import (
    ActionResult,
    Category,
    Finding,
    IncidentState,
    LogLine,
    Outcome,
    ProcessEvent,
    ProcessState,
    Role,
    Severity,
)
from ascend_doctor.core.store import STORE_NAME, Store


def is_bundle(path: Path) -> bool:
    """Whether ``path`` is a tar archive (a support bundle) rather than a store file."""
    return path.is_file() and tarfile.is_tarfile(path)


def store_from_bundle(bundle: Path, into: Path) -> Path:
    """Unpack ``bundle``'s logs into ``into`` and rebuild its store there; returns the store
    file. DoctorError when the archive is not a bundle with a store."""
    into.mkdir(parents=True, exist_ok=True)
    members: dict[str, bytes] = {}
    with tarfile.open(bundle) as tar:
        for m in tar.getmembers():
            parts = PurePosixPath(m.name).parts
            if not m.isfile() or len(parts) < 2 or ".." in parts:
                continue
            name = "/".join(parts[1:])  # below the bundle's top directory
            if name.startswith(("store/", "logs/")) or name == "MANIFEST.json":
                fh = tar.extractfile(m)
                if fh is not None:
                    members[name] = fh.read()
    if "store/incidents.json" not in members:
        raise DoctorError(f"{bundle}: not a support bundle with a store (no store/incidents.json)")
    manifest = json.loads(members.get("MANIFEST.json", b"{}"))
    # original path -> (unpacked path, bytes cut from its head)
    logs: dict[str, tuple[str, int]] = {}
    for entry in manifest.get("members", []):
        name, source = entry.get("name", ""), entry.get("source")
        if not name.startswith("logs/") or not source or name not in members:
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(members[name])
        cut = int(entry.get("truncated_from") or len(members[name])) - len(members[name])
        logs[str(source)] = (str(target), max(0, cut))

    def part(name: str) -> Any:
        return json.loads(members.get(f"store/{name}.json", b"null"))

    db = into / STORE_NAME
    db.unlink(missing_ok=True)
    store = Store(db)
    try:
        _fill(store, part, logs)
    finally:
        store.close()
    return db


def _where(logs: dict[str, tuple[str, int]], path: str, offset: int) -> tuple[str, int]:
    if path in logs:
        unpacked, cut = logs[path]
        return unpacked, offset - cut if offset >= cut else -1
    return path, offset


def _fill(store: Store, part: Any, logs: dict[str, tuple[str, int]]) -> None:
    ids: dict[int, int] = {}
    for inc in part("incidents") or []:
        opener = Finding(
            rule=inc["rule"],
            category=Category(inc["category"]),
            severity=Severity.parse(inc["severity"]),
            role=Role.ROOT,
            subject=inc["subject"],
            summary=inc["summary"],
            at=inc["opened_at"],
        )
        new = store.open_incident(opener).id
        ids[int(inc["id"])] = new
        for a in inc.get("actions", []):
            store.add_action(
                new,
                ActionResult(a["name"], a["params"], Outcome(a["outcome"]), a["reason"], a["at"]),
            )
        store.update_incident(
            new,
            state=IncidentState(inc["state"]),
            resolved_at=inc.get("resolved_at"),
            acknowledged=bool(inc.get("acknowledged")),
        )
    for f in part("findings") or []:
        path, offset = _where(logs, f["path"], int(f["offset"]))
        evidence = []
        for e in f.get("evidence", []):
            epath, eoff = _where(logs, e["path"], int(e["offset"]))
            evidence.append(LogLine(epath, eoff, e["text"], int(e.get("line") or 0)))
        finding = Finding(
            rule=f["rule"],
            category=Category(f["category"]),
            severity=Severity.parse(f["severity"]),
            role=Role(f["role"]),
            subject=f["subject"],
            summary=f["summary"],
            at=f["at"],
            captures=f.get("captures", {}),
            evidence=tuple(evidence),
            path=path,
            offset=offset,
            file_id=f"bundle:{f.get('file_id', f['path'])}",
        )
        old = f.get("incident_id")
        store.add_finding(finding, ids.get(int(old)) if old is not None else None)
    for e in part("process_events") or []:
        store.add_process_event(
            ProcessEvent(
                state=ProcessState(e["state"]),
                previous=ProcessState(e["previous"]),
                at=float(e["at"]),
                pid=e.get("pid"),
                exit_code=e.get("exit_code"),
                crashed=bool(e.get("crashed")),
                reason=str(e.get("reason", "")),
            )
        )
    for collector, subjects in (part("samples") or {}).items():
        for subject, data in subjects.items():
            values = {k: v for k, v in data.items() if k != "at"}
            store.add_sample(collector, subject, float(data.get("at", 0.0)), values)
    for o in part("overrides") or []:
        store.set_override(o["key"], o["kind"], o["value"], o.get("incident_id"))
    for key, value in (part("meta") or {}).items():
        if key == "doctor" and isinstance(value, dict):
            value = {**value, "pid": 0}  # that doctor ran on another host or time
        store.set_meta(key, value)
    store.set_offsets(
        [
            (f"bundle:{i}", unpacked, 0, "", f"bundle:{i}")
            for i, (unpacked, _) in enumerate(logs.values())
        ]
    )


__all__ = ["is_bundle", "store_from_bundle"]
