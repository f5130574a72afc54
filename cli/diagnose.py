"""``ascend-doctor diagnose``: offline root-cause analysis of collected logs.

Reads log files, plog/slog trees and tar bundles at the engine's scan speed,
then ranks what it found: root causes first (up the chain first: rules/ranking.py, with the
evidence lines by file and line), unrecognised errors after them, then symptoms, then a
timeline.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from ascend_doctor.cli import parallel
from ascend_doctor.cli.diagnose_store import (
    Samples,
    bundle_evidence,
    bundle_json,
    bundle_profiles,
    bundle_samples,
    ecc_samples,
    listed,
    sample_findings,
    state_dir_records,
)
from ascend_doctor.cli.parallel import as_is, paused_gc, regular_pieces, scan_pieces
from ascend_doctor.collectors.logs import read_chunks, source_kind
from ascend_doctor.collectors.npu_smi_ecc import ECC_HEAD
from ascend_doctor.collectors.npu_smi_format import parse_info, samples_from_info
from ascend_doctor.core import regex
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.events import Category, Finding, LogLine
from ascend_doctor.rules import Engine, RuleSet
from ascend_doctor.rules.infer import is_inferred
from ascend_doctor.rules.ranking import Ranked, rank_causes

SNIFF = 8192

_PLOG_TS = regex.compile(rb"(\d{4})-(\d\d)-(\d\d)-(\d\d):(\d\d):(\d\d)\.(\d{3})")
_VLLM_TS = regex.compile(
    rb"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)"
)

ACTION_TEXT = {
    "lower_max_model_len": "lower --max-model-len to what fits",
    "lower_gpu_memory_utilization": "lower --gpu-memory-utilization",
    "lower_max_num_seqs": "lower --max-num-seqs",
    "lower_swap_space": "lower --swap-space (host memory pinned for swapped KV blocks)",
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
    incidents: list[dict[str, Any]] = field(default_factory=list)
    """The incidents a bundle's store holds (``store/incidents.json``), some of which no log
    line shows (a hang seen only in the metrics)."""
    evidence: list[dict[str, Any]] = field(default_factory=list)
    """Evidence snapshots a bundle lists (kept before restarts), with their files."""
    samples: list[dict[str, Any]] = field(default_factory=list)
    """Stored npu-smi samples worth a look (Health not OK, uncorrectable ECC errors)."""
    store_read: bool = False
    """A state dir's store was read (something was read even without a log)."""


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
    if str(path) == "-":  # standard input, as everywhere on the command line
        yield "-", _const(sys.stdin.buffer), ""
        return
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


def _const(stream: IO[bytes]) -> Callable[[], IO[bytes]]:
    return lambda: stream


def _opener(path: Path) -> Callable[[], IO[bytes]]:
    return lambda: open(path, "rb")


def diagnose(
    paths: list[Path],
    rules: RuleSet,
    *,
    progress: Callable[[int], None] | None = None,
    jobs: int = 1,
    state_dir: Path | None = None,
) -> Diagnosis:
    """Scan everything under ``paths``; unreadable files are listed, never fatal. A file of
    more than one chunk is scanned by ``jobs`` worker processes (same findings). With
    ``state_dir``, its store's incidents and samples are read and the logs its tailer followed
    scanned too (DoctorError when it has no readable store)."""
    engine = Engine(rules, clock=lambda: 0.0)
    result = Diagnosis()
    paths = list(paths)
    if state_dir is not None:
        incidents, samples, logs = state_dir_records(state_dir)
        result.store_read = True
        result.incidents += incidents
        _stored_samples(result, samples, engine, len(paths) + len(logs))
        paths += [Path(p) for p in logs if Path(p).is_file()]
    for path in paths:
        if path.is_file() and path.name.endswith((".tar.gz", ".tgz", ".tar")):
            result.profiles += bundle_profiles(path)
            result.incidents += bundle_json(path, "/store/incidents.json")
            result.evidence += bundle_evidence(path)
            _stored_samples(result, bundle_samples(path), engine, len(paths))
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
                if NPU_SMI_HEAD.search(head):  # a saved `npu-smi info`: its table, not lines
                    _npu_smi(head + f.read(), index, engine, result, label)
                    result.files_read += 1
                    continue
                if ECC_HEAD.search(head):  # a saved `npu-smi info -t ecc`: its counters
                    data = head + f.read()
                    found = engine.evaluate(ecc_samples(data.decode(errors="replace")))
                    _sampled(result, found, index, label)
                    result.lines_read += data.count(b"\n")
                    result.files_read += 1
                    continue
                parts = regular_pieces(f, already_read=len(head)) if jobs > 1 else []
                if len(parts) > 1:
                    for size, newlines, found in scan_pieces(
                        engine, label, label, kind, parts, jobs, as_is
                    ):
                        _add(result, found, index)
                        result.lines_read += newlines
                        if progress is not None:
                            progress(size)
                else:
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
    block = parallel.block_of(f)
    for chunk in read_chunks(f, label, kind, already_read=head, block=block):
        with paused_gc():
            _add(result, engine.scan(chunk), index)
        result.lines_read += chunk.lines
        if progress is not None:
            progress(len(chunk.data))


def _stored_samples(result: Diagnosis, samples: Samples, engine: Engine, index: int) -> None:
    """The sample rules over a store's last npu-smi samples; the devices worth a look."""
    _sampled(result, sample_findings(samples, engine), index, "npu-smi sample in the store")
    result.samples += listed(samples)


def _sampled(result: Diagnosis, findings: list[Finding], index: int, source: str) -> None:
    """Findings of samples, the worst of a device first; each is its own evidence line (a
    sample has no line to quote), named by where the sample came from."""
    for f in sorted(findings, key=lambda f: (f.subject, -f.severity)):
        line = LogLine(source, 0, f.summary)
        found = dataclasses.replace(f, path=source, evidence=(line,))
        result.hits.append(_Hit(found, (index, 0), None))


def _add(result: Diagnosis, findings: list[Finding], index: int) -> None:
    for finding in findings:
        text = finding.evidence[0].text.encode() if finding.evidence else b""
        result.hits.append(_Hit(finding, (index, finding.offset), _timestamp(text)))


NPU_SMI_HEAD = regex.compile(rb"^\| npu-smi \S+\s+Version:", re.M)
"""The first line of the table ``npu-smi info`` prints."""


def _npu_smi(data: bytes, index: int, engine: Engine, result: Diagnosis, label: str) -> None:
    """The sample rules over an ``npu-smi info`` snapshot (a card whose Health is not OK)."""
    try:
        samples = samples_from_info(parse_info(data.decode(errors="replace")), 0.0)
    except CollectorError as exc:
        result.unreadable.append({"path": f"npu-smi snapshot {index}", "error": str(exc)})
        return
    _sampled(result, engine.evaluate(samples), index, label)
    result.lines_read += data.count(b"\n")


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


def _ordered(hits: list[_Hit]) -> list[tuple[_Hit, float | None]]:
    """File order within a file; across files, by time. A line without a timestamp takes
    its file's nearest earlier one (or the next one), so a traceback stays with its header.
    Each hit comes with that effective time."""
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

    return [(h, effective[id(h)]) for h in sorted(hits, key=key)]


def _cause_key(causes: dict[tuple[str, str], Any], category: str, subject: str) -> tuple[str, str]:
    """The cause a root finding belongs to: a line that names no device ("server") is the same
    fault as one of its category that does, as the doctor's incidents group them (a heartbeat
    loss the driver reports for npu3 and the runtime reports as 507010 is one root cause)."""
    for cat, subj in causes:
        if cat == category and (subj == subject or "server" in (subj, subject)):
            return cat, subj
    return category, subject


def report(result: Diagnosis, rules: RuleSet) -> dict[str, Any]:
    """The ranked report as the JSON ``diagnose --json`` prints: root causes ranked across
    the chain (rules/ranking.py: what makes the others happen first), then unrecognised
    errors, then every other finding as a symptom."""
    timed = _ordered(result.hits)
    hits = [h for h, _ in timed]
    steps = {r.id: r.remediation for r in rules.text}
    ranked = rank_causes([Ranked(h.finding, when, h.order) for h, when in timed])
    causes: dict[tuple[str, str], dict[str, Any]] = {}
    named: set[int] = set()
    for group in ranked:
        # the line that names the device (the driver's, the runtime's) leads its cause
        f = next(
            (
                i.finding
                for i in group
                if i.finding.subject != "server" and i.finding.category == group[0].finding.category
            ),
            group[0].finding,
        )
        key = (f.category.value, f.subject)
        entry = causes.get(key) or causes.setdefault(key, _cause(f, steps))
        # another rule's finding of the same cause (a card's Health and its ECC counters):
        # its first line is evidence too
        rules_in = entry.setdefault("_rules", {entry["rule"]})
        for i in group:
            other = i.finding
            if (other.category, other.subject) == (f.category, f.subject) and (
                other.rule not in rules_in
            ):
                rules_in.add(other.rule)
                entry["evidence"] += _cause(other, steps)["evidence"][:1]
        entry["count"] += len(group)
        named.update(id(i.finding) for i in group)
    for entry in causes.values():
        entry.pop("_rules", None)
    causes = _device_leads(causes)
    # then errors no rule explains: first those whose family their words suggest
    # (rules/infer.py), then the plain unrecognised ones
    inferred = [h.finding for h in hits if is_inferred(h.finding)]
    unknown = [h.finding for h in hits if h.finding.category == Category.UNRECOGNISED]
    for f in (*inferred, *unknown):
        if id(f) not in named:
            kind = f.rule if is_inferred(f) else "unrecognised"
            entry = causes.setdefault((kind, f.summary), _cause(f, steps))
            entry["count"] += 1
            named.add(id(f))
    symptoms: dict[str, dict[str, Any]] = {}
    for hit in hits:
        f = hit.finding
        if id(f) in named:
            continue
        evidence = [{"path": e.path, "line": e.line, "text": e.text} for e in f.evidence]
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
        "stored_incidents": [
            {
                **{k: i.get(k) for k in ("id", "state", "category", "subject", "summary")},
                "in_logs": any(c["category"] == i.get("category") for c in causes.values()),
            }
            for i in result.incidents
        ],
        "evidence": result.evidence,
        "stored_samples": result.samples,
        "store_read": result.store_read,
    }


def _device_leads(
    causes: dict[tuple[str, str], dict[str, Any]],
) -> dict[tuple[str, str], dict[str, Any]]:
    """A cause seen as the server's and as one device's is one cause, the device's: the line
    that names the device (the driver's) leads, in the place the first of them had."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    devices = {cat: [k for k in causes if k[0] == cat and k[1] != "server"] for cat, _ in causes}
    for key, entry in causes.items():
        cat, subject = key
        if subject == "server" and len(devices[cat]) == 1:
            target = devices[cat][0]
            lead = causes[target]
            merged = dict(lead)
            merged["count"] = lead["count"] + entry["count"]
            merged["evidence"] = lead["evidence"] + entry["evidence"]
            out[target] = merged
        elif key not in out:  # else: already placed where the server's cause stood
            out[key] = entry
    return out


def _cause(f: Finding, steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "category": f.category.value,
        "rule": f.rule,
        "subject": f.subject,
        "severity": f.severity.label,
        "summary": f.summary,
        "explain": f.explain,
        "count": 0,
        "evidence": [{"path": e.path, "line": e.line, "text": e.text} for e in f.evidence],
        "suggestions": _suggestions(steps.get(f.rule) or f.remediation),
    }


def _suggestions(steps: Any) -> list[str]:
    out = []
    for step in steps:
        parts = [ACTION_TEXT.get(a.name, a.name).format(**a.params) for a in step]
        out.append(", then ".join(parts))
    return out or ["no automatic fix: investigate (see explain)"]


__all__ = ["Diagnosis", "diagnose", "report"]
