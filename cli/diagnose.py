"""``ascend-doctor diagnose``: offline root-cause analysis of collected logs.

Reads log files, plog/slog trees and tar bundles at the engine's scan speed,
then ranks what it found: root causes first (earliest first, with the evidence
lines by file and line), then symptoms, then a timeline.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from ascend_doctor.collectors.logs import read_chunks, source_kind
from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import Finding, Role
from ascend_doctor.core.records import Artifact, decode
from ascend_doctor.rules import Engine, RuleSet

SNIFF = 8192

_PLOG_TS = re.compile(rb"(\d{4})-(\d\d)-(\d\d)-(\d\d):(\d\d):(\d\d)\.(\d{3})")
_VLLM_TS = re.compile(rb"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")

ACTION_TEXT = {
    "lower_max_model_len": "lower --max-model-len to what fits",
    "lower_gpu_memory_utilization": "lower --gpu-memory-utilization",
    "lower_max_num_seqs": "lower --max-num-seqs",
    "set_env": "set {name}={value}",
    "enforce_eager": "run with --enforce-eager",
    "raise_hccl_timeout": "raise HCCL_CONNECT_TIMEOUT / HCCL_EXEC_TIMEOUT",
    "reset_device": "reset the device with npu-smi set -t reset (server stopped)",
    "restart": "restart the server",
    "collect_diagnostics": "keep the evidence: stacks, npu-smi health and ECC, log tails, metrics",
    "restart_when_quiet": "restart the server in the next quiet window, before memory runs out",
    "capture_profile": "capture a profile of the live server",
}


@dataclass
class _Hit:
    finding: Finding
    order: tuple[int, int]
    when: datetime | None


@dataclass
class Diagnosis:
    """What ``diagnose`` found."""

    hits: list[_Hit] = field(default_factory=list)
    files_read: int = 0
    lines_read: int = 0
    unreadable: list[dict[str, str]] = field(default_factory=list)
    profiles: list[dict[str, Any]] = field(default_factory=list)
    """Captured profiles a bundle's store holds, with their analysis."""
    evidence: list[dict[str, Any]] = field(default_factory=list)
    """Evidence snapshots a bundle lists (kept before restarts), with their files."""


def _files(paths: list[Path]) -> Iterator[tuple[str, Callable[[], IO[bytes]] | None, str]]:
    """(label, opener, error) for every file under ``paths``; tar members included."""
    for path in paths:
        if path.is_dir():
            for root, dirs, names in os.walk(path):
                dirs.sort()
                for name in sorted(names):
                    yield from _one(Path(root) / name)
        else:
            yield from _one(path)


def _one(path: Path) -> Iterator[tuple[str, Callable[[], IO[bytes]] | None, str]]:
    name = path.name
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            tar = tarfile.open(path)
        except (OSError, tarfile.TarError) as exc:
            yield str(path), None, f"cannot open bundle: {exc}"
            return
        with tar:
            members = tar.getmembers()
            # an ascend-doctor bundle: its store/*.json repeat the log lines as evidence
            is_bundle = any(m.name.endswith("/MANIFEST.json") for m in members)
            for member in members:
                if is_bundle and "/logs/" not in member.name and "/npu-smi/" not in member.name:
                    continue
                if member.isfile():
                    data = tar.extractfile(member)
                    if data is not None:
                        yield f"{path}:{member.name}", _const(data), ""
        return
    if not path.exists():
        yield str(path), None, "no such file or directory"
        return
    yield str(path), _opener(path), ""


def bundle_profiles(path: Path) -> list[dict[str, Any]]:
    """The profiles a bundle's ``store/meta.json`` records, each with its stored analysis."""
    try:
        with tarfile.open(path) as tar:
            member = next(
                (m for m in tar.getmembers() if m.name.endswith("/store/meta.json")), None
            )
            data = tar.extractfile(member) if member is not None else None
            meta = json.loads(data.read()) if data is not None else {}
    except (OSError, tarfile.TarError, ValueError):
        return []
    raw = meta.get("artifacts") if isinstance(meta, dict) else None
    out = []
    for item in raw if isinstance(raw, list) else []:
        try:
            art = decode(Artifact, item, "artifacts")
        except StoreError:
            continue
        out.append(
            {
                "kind": art.kind,
                "path": art.path,
                "started_at": art.started_at,
                "headline": art.analysis.headline if art.analysis else "not analysed",
                "report": art.analysis.report if art.analysis else "",
            }
        )
    return out


def bundle_evidence(path: Path) -> list[dict[str, Any]]:
    """The evidence snapshots a bundle's ``artifacts/index.json`` lists (each a directory the
    doctor wrote before a restart: stacks, npu-smi, log tails, metrics), oldest first, with
    the reason their own ``index.json`` gives when the bundle carries the files."""
    snaps: dict[str, dict[str, Any]] = {}
    try:
        with tarfile.open(path) as tar:
            names = {m.name.split("/", 1)[-1]: m for m in tar.getmembers()}
            member = names.get("artifacts/index.json")
            data = tar.extractfile(member) if member is not None else None
            listed = json.loads(data.read()) if data is not None else []
            for item in listed if isinstance(listed, list) else []:
                snap, _, name = str(item.get("path", "")).partition("/")
                if not name:
                    continue
                entry = snaps.setdefault(snap, {"snapshot": snap, "files": [], "reason": ""})
                entry["files"].append(name)
                own = names.get(f"artifacts/{snap}/{name}")
                if name == "index.json" and own is not None and (f := tar.extractfile(own)):
                    entry["reason"] = str(json.loads(f.read()).get("reason", ""))
    except (OSError, tarfile.TarError, ValueError, AttributeError):
        return []
    return sorted(snaps.values(), key=lambda e: e["snapshot"].rsplit("-", 1)[-1])


def _const(stream: IO[bytes]) -> Callable[[], IO[bytes]]:
    return lambda: stream


def _opener(path: Path) -> Callable[[], IO[bytes]]:
    return lambda: open(path, "rb")


def diagnose(
    paths: list[Path], rules: RuleSet, *, progress: Callable[[int], None] | None = None
) -> Diagnosis:
    """Scan everything under ``paths``; unreadable files are listed, never fatal."""
    engine = Engine(rules, clock=lambda: 0.0)
    result = Diagnosis()
    for path in paths:
        if path.is_file() and path.name.endswith((".tar.gz", ".tgz", ".tar")):
            result.profiles += bundle_profiles(path)
            result.evidence += bundle_evidence(path)
    for index, (label, opener, error) in enumerate(_files(paths)):
        if opener is None:
            result.unreadable.append({"path": label, "error": error})
            continue
        try:
            with opener() as f:
                head = f.read(SNIFF)
                if b"\0" in head:
                    result.unreadable.append({"path": label, "error": "binary file, skipped"})
                    continue
                kind = source_kind(label.rsplit(":", 1)[-1] if ".tar" in label else label)
                _scan(f, head, label, kind, index, engine, result, progress)
                result.files_read += 1
        except OSError as exc:
            result.unreadable.append({"path": label, "error": exc.strerror or str(exc)})
    return result


def _scan(
    f: IO[bytes],
    head: bytes,
    label: str,
    kind: str,
    index: int,
    engine: Engine,
    result: Diagnosis,
    progress: Callable[[int], None] | None,
) -> None:
    for chunk in read_chunks(f, label, kind, already_read=head):
        for finding in engine.scan(chunk):
            text = finding.evidence[0].text.encode() if finding.evidence else b""
            result.hits.append(_Hit(finding, (index, finding.offset), _timestamp(text)))
        result.lines_read += chunk.data.count(b"\n")
        if progress is not None:
            progress(len(chunk.data))


def _timestamp(text: bytes) -> datetime | None:
    m = _PLOG_TS.search(text)
    try:
        if m:
            y, mo, d, h, mi, s, ms = (int(x) for x in m.groups())
            return datetime(y, mo, d, h, mi, s, ms * 1000)
        m = _VLLM_TS.search(text)
        if m:
            mo, d, h, mi, s = (int(x) for x in m.groups())
            return datetime(datetime.now().year, mo, d, h, mi, s)
    except ValueError:
        return None
    return None


def _ordered(hits: list[_Hit]) -> list[_Hit]:
    """File order within a file; across files, by time. A line without a timestamp takes
    its file's nearest earlier one (or the next one), so a traceback stays with its header."""
    hits = sorted(hits, key=lambda h: h.order)
    effective: dict[int, float | None] = {}
    by_file: dict[int, list[_Hit]] = {}
    for h in hits:
        by_file.setdefault(h.order[0], []).append(h)
    for file_hits in by_file.values():
        known = [h.when.timestamp() if h.when else None for h in file_hits]
        nxt: float | None = None
        backfill: list[float | None] = [None] * len(known)
        for i in range(len(known) - 1, -1, -1):
            nxt = known[i] if known[i] is not None else nxt
            backfill[i] = nxt
        last: float | None = None
        for i, h in enumerate(file_hits):
            last = known[i] if known[i] is not None else last
            effective[id(h)] = last if last is not None else backfill[i]

    def key(h: _Hit) -> tuple[int, float, tuple[int, int]]:
        t = effective[id(h)]
        return (0, t, h.order) if t is not None else (1, 0.0, h.order)

    return sorted(hits, key=key)


def report(result: Diagnosis, rules: RuleSet) -> dict[str, Any]:
    """The ranked report as the JSON ``diagnose --json`` prints."""
    hits = _ordered(result.hits)
    causes: dict[tuple[str, str], dict[str, Any]] = {}
    symptoms: dict[str, dict[str, Any]] = {}
    steps = {r.id: r.remediation for r in rules.text}
    for hit in hits:
        f = hit.finding
        evidence = [{"path": e.path, "line": e.line, "text": e.text} for e in f.evidence]
        if f.role == Role.ROOT:
            key = (f.category.value, f.subject)
            if key not in causes:
                causes[key] = {
                    "category": f.category.value,
                    "rule": f.rule,
                    "subject": f.subject,
                    "severity": f.severity.label,
                    "summary": f.summary,
                    "explain": f.explain,
                    "count": 0,
                    "evidence": evidence,
                    "suggestions": _suggestions(steps.get(f.rule, ())),
                }
            causes[key]["count"] += 1
        else:
            entry = symptoms.setdefault(
                f.rule,
                {
                    "category": f.category.value,
                    "rule": f.rule,
                    "summary": f.summary,
                    "count": 0,
                    "evidence": evidence,
                },
            )
            entry["count"] += 1
    timeline = [
        {
            "at": h.when.isoformat(sep=" ") if h.when else None,
            "rule": h.finding.rule,
            "role": h.finding.role.value,
            "path": h.finding.path,
            "line": h.finding.evidence[0].line if h.finding.evidence else 0,
            "summary": h.finding.summary,
        }
        for h in hits
    ]
    return {
        "root_causes": list(causes.values()),
        "symptoms": list(symptoms.values()),
        "timeline": timeline,
        "files_read": result.files_read,
        "lines_read": result.lines_read,
        "unreadable": result.unreadable,
        "profiles": result.profiles,
        "evidence": result.evidence,
    }


def _suggestions(steps: Any) -> list[str]:
    out = []
    for step in steps:
        parts = [ACTION_TEXT.get(a.name, a.name).format(**a.params) for a in step]
        out.append(", then ".join(parts))
    return out or ["no automatic fix: investigate (see explain)"]


__all__ = ["Diagnosis", "diagnose", "report"]
