"""What ``diagnose`` reads besides log lines: the doctor's own records and saved npu-smi text.

A bundle's ``store/*.json`` and a state dir's store hold the incidents the doctor opened (some
of which no log line shows: a hang seen only in the metrics) and the last npu-smi sample of
each device; a bundle also lists the profiles and the evidence snapshots the doctor kept.
Those samples go through the same sample rules as the daemon's (a Health that is not OK,
uncorrectable ECC errors), so a card the doctor saw failing is a root cause here too, and the
devices worth a look are listed with what npu-smi said. A saved
``npu-smi info -t ecc -i N`` is read the same way.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from ascend_doctor.collectors.npu_smi_ecc import ecc_subjects, npu_id, parse_ecc
from ascend_doctor.core.errors import DoctorError, StoreError
from ascend_doctor.core.events import Finding, Sample
from ascend_doctor.core.records import Artifact, decode
from ascend_doctor.rules import Engine

Samples = dict[str, dict[str, dict[str, Any]]]
"""collector -> subject -> the newest sample's values (with its ``at``), as the store keeps
them and a bundle's ``store/samples.json`` holds them."""

SHOWN = (
    "health",
    "health_error_code",
    "health_error_info",
    "hbm_ecc_double_bit_errors",
    "hbm_ecc_double_bit_total",
    "hbm_ecc_double_bit_isolated_pages",
)
"""The values of a listed device sample."""


def bundle_json(path: Path, suffix: str) -> list[dict[str, Any]]:
    """A JSON list a bundle holds (empty when it has none or it does not read)."""
    try:
        with tarfile.open(path) as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith(suffix)), None)
            data = tar.extractfile(member) if member is not None else None
            value = json.loads(data.read()) if data is not None else []
    except (OSError, tarfile.TarError, ValueError):
        return []
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


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


def bundle_samples(path: Path) -> Samples:
    """A bundle's ``store/samples.json`` (empty when it has none or it does not read)."""
    try:
        with tarfile.open(path) as tar:
            member = next(
                (m for m in tar.getmembers() if m.name.endswith("/store/samples.json")), None
            )
            data = tar.extractfile(member) if member is not None else None
            value = json.loads(data.read()) if data is not None else {}
    except (OSError, tarfile.TarError, ValueError):
        return {}
    return _samples(value)


def _samples(value: Any) -> Samples:
    if not isinstance(value, dict):
        return {}
    return {
        str(c): {str(s): d for s, d in subjects.items() if isinstance(d, dict)}
        for c, subjects in value.items()
        if isinstance(subjects, dict)
    }


def state_dir_records(state_dir: Path) -> tuple[list[dict[str, Any]], Samples, list[str]]:
    """(incidents, latest samples, the log files the tailer followed) of a state dir's store;
    :class:`DoctorError` when there is no store or it cannot be read."""
    from ascend_doctor.cli.views import incident_dicts
    from ascend_doctor.core.store import STORE_NAME, Store

    if not (state_dir / STORE_NAME).exists():
        raise DoctorError(f"{state_dir / STORE_NAME}: no store here (has the doctor run?)")
    store = Store.in_dir(state_dir, readonly=True)
    try:
        incidents = incident_dicts(store)
        samples = {c: store.latest_samples(c) for c in ("npu_smi", "vllm", "process")}
        logs = store.log_paths()
    finally:
        store.close()
    return incidents, samples, logs


def sample_findings(samples: Samples, engine: Engine) -> list[Finding]:
    """The sample rules over the stored npu-smi samples, one finding per rule and device."""
    stored = [
        Sample("npu_smi", subject, float(data.get("at") or 0.0), data)
        for subject, data in sorted(samples.get("npu_smi", {}).items())
    ]
    return engine.evaluate(stored)


def listed(samples: Samples) -> list[dict[str, Any]]:
    """The stored device samples worth a look: Health not OK, or uncorrectable ECC errors."""
    out = []
    for subject, data in sorted(samples.get("npu_smi", {}).items()):
        bad_health = data.get("health") not in (None, "OK")
        ecc = any(
            isinstance(data.get(k), int) and data[k] > 0
            for k in ("hbm_ecc_double_bit_errors", "hbm_ecc_double_bit_total")
        )
        if bad_health or ecc:
            shown = {k: data[k] for k in SHOWN if data.get(k) is not None}
            out.append({"subject": subject, "at": data.get("at"), **shown})
    return out


def ecc_samples(text: str) -> list[Sample]:
    """The samples of a saved ``npu-smi info -t ecc -i N`` (none when it names no card)."""
    npu = npu_id(text)
    if npu is None:
        return []
    return [
        Sample("npu_smi", subject, 0.0, dict(values))
        for subject, values in ecc_subjects(npu, parse_ecc(text)).items()
    ]


def describe(sample: dict[str, Any]) -> str:
    """One line of a listed device sample, as an operator reads it."""
    parts = []
    if sample.get("health") not in (None, "OK"):
        code = sample.get("health_error_code")
        parts.append(f"health {sample['health']}" + (f" ({code})" if code else ""))
    from ascend_doctor.cli.views import plural

    current, total, pages = (
        sample.get(k)
        for k in (
            "hbm_ecc_double_bit_errors",
            "hbm_ecc_double_bit_total",
            "hbm_ecc_double_bit_isolated_pages",
        )
    )
    if any(isinstance(v, int) and v > 0 for v in (current, total)):
        ecc = []
        if isinstance(current, int):
            ecc.append(plural(current, "uncorrectable ECC error"))
        if isinstance(total, int):
            ecc.append(f"{total} in the card's life")
        if isinstance(pages, int):
            ecc.append(plural(pages, "page") + " isolated")
        parts.append(", ".join(ecc))
    return "; ".join(parts)


__all__ = [
    "Samples",
    "bundle_evidence",
    "bundle_json",
    "bundle_profiles",
    "bundle_samples",
    "describe",
    "ecc_samples",
    "listed",
    "sample_findings",
    "state_dir_records",
]
