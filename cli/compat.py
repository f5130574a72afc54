"""The compatibility table of vLLM-Ascend stacks (``rules/compat.yaml``) and its checks.

vllm-ascend and vLLM from the same release line, with the CANN and torch/torch_npu they were
released with. Shared by ``check`` (preflight) and anything else that names a fitting stack.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ascend_doctor.core import regex
from ascend_doctor.core.errors import RuleError


class Status(StrEnum):
    """Outcome of one check."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class CheckResult:
    """One row of the report."""

    name: str
    """Stable check name (``driver``, ``compat.cann``, ...)."""
    status: Status
    """pass, warn, fail or skip."""
    detail: str
    """What was found."""
    fix: str = ""
    """What to do about it (empty when nothing is to be done)."""


@dataclass(frozen=True)
class CompatRow:
    """One known-good stack of ``rules/compat.yaml``."""

    vllm_ascend: str
    """vllm-ascend release."""
    vllm: str
    """vLLM release it runs on."""
    cann: tuple[str, ...]
    """Accepted CANN versions; the first is the one to suggest."""
    torch: str
    """PyTorch version."""
    torch_npu: tuple[str, ...]
    """Accepted torch_npu versions; the first is the one to suggest."""
    source: str = ""
    """Where the row comes from."""

    def combo(self) -> str:
        """The whole stack in one line, as a fix names it."""
        return (
            f"vllm-ascend {self.vllm_ascend} + vLLM {self.vllm} + CANN {self.cann[0]} + "
            f"torch {self.torch} + torch_npu {self.torch_npu[0]}"
        )


# -- versions ---------------------------------------------------------------------------------

_RELEASE = regex.compile(r"^\s*v?(\d+(?:\.\d+)*)")
_CANN = regex.compile(r"(\d+)\.(\d+)\.(?:rc(\d+)|(\d+))", re.IGNORECASE)


def _norm(version: str) -> str:
    """Lower case, no leading ``v``, no local part."""
    return version.strip().lower().removeprefix("v").split("+", 1)[0]


def release(version: str) -> tuple[int, ...]:
    """Release numbers of a PEP 440-ish version: ``2.7.1.post1+cpu`` -> ``(2, 7, 1)``."""
    match = _RELEASE.match(version)
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def cann_key(version: str) -> tuple[int, int, int, int] | None:
    """Sortable CANN version: ``8.3.RC2`` < ``8.3.0`` < ``8.5.1``; None when unreadable."""
    match = _CANN.search(version)
    if match is None:
        return None
    major, minor, rc, patch = match.groups()
    if rc is not None:
        return (int(major), int(minor), 0, int(rc))
    return (int(major), int(minor), 1, int(patch))


def _versions(where: str, value: Any) -> tuple[str, ...]:
    """A version or a non-empty list of versions; RuleError naming ``where`` otherwise."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v for v in items):
        raise RuleError(f"{where} is {value!r}: expected a version or a list of versions")
    return tuple(items)


def load_compat(path: Path | None = None) -> list[CompatRow]:
    """Read the compatibility table; raises :class:`RuleError` naming the file and the key."""
    if path is None:
        path = Path(str(resources.files("ascend_doctor.rules") / "compat.yaml"))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise RuleError(f"compat table {path}: {exc}") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise RuleError(f"compat table {path}: 'rows' is missing: expected a list of stacks")
    out: list[CompatRow] = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise RuleError(f"compat table {path}: rows[{i}] is {row!r}: expected a mapping")
        where = f"compat table {path}: rows[{i}]"
        one = {k: _versions(f"{where}.{k}", row.get(k)) for k in ("vllm_ascend", "vllm", "torch")}
        for key, values in one.items():
            if len(values) != 1:
                raise RuleError(f"{where}.{key} is {list(values)!r}: expected one version")
        out.append(
            CompatRow(
                vllm_ascend=one["vllm_ascend"][0],
                vllm=one["vllm"][0],
                cann=_versions(f"{where}.cann", row.get("cann")),
                torch=one["torch"][0],
                torch_npu=_versions(f"{where}.torch_npu", row.get("torch_npu")),
                source=str(row.get("source", "")),
            )
        )
    return out


def find_row(rows: Sequence[CompatRow], vllm_ascend: str) -> CompatRow | None:
    """The row of this vllm-ascend: the exact release, else the same ``X.Y.Z`` release line."""
    for row in rows:
        if _norm(row.vllm_ascend) == _norm(vllm_ascend):
            return row
    for row in rows:
        if release(row.vllm_ascend)[:3] == release(vllm_ascend)[:3]:
            return row
    return None


def _fits(rows: Sequence[CompatRow], what: str, installed: str) -> str:
    """A sentence naming the rows that fit the installed CANN or torch, else that none does."""
    if what == "CANN":
        key = cann_key(installed)
        fit = [r for r in rows if key is not None and key in {cann_key(c) for c in r.cann}]
    else:
        fit = [r for r in rows if release(r.torch)[:3] == release(installed)[:3]]
    if not fit:
        return f"no known-good stack uses {what} {installed}"
    return f"with {what} {installed} installed: " + " or ".join(r.combo() for r in fit)


def compat_checks(
    rows: Sequence[CompatRow], versions: Mapping[str, str | None], cann: str | None
) -> list[CheckResult]:
    """Compare the installed stack with the table; every mismatch names the fitting stack."""
    va = versions.get("vllm_ascend")
    if not va:
        return [CheckResult("compat", Status.SKIP, "vllm-ascend is not installed")]
    row = find_row(rows, va)
    if row is None:
        known = ", ".join(r.vllm_ascend for r in rows)
        return [
            CheckResult(
                "compat",
                Status.WARN,
                f"vllm-ascend {va} is not in the compatibility table (known: {known})",
                "use a released vllm-ascend from the table, or add its row to rules/compat.yaml",
            )
        ]
    out: list[CheckResult] = []
    want = row.combo()

    vllm = versions.get("vllm")
    if not vllm:
        out.append(CheckResult("compat.vllm", Status.SKIP, "vLLM is not installed"))
    elif release(vllm)[:3] != release(row.vllm)[:3]:
        out.append(
            CheckResult(
                "compat.vllm",
                Status.FAIL,
                f"vLLM {vllm} is not the release line of vllm-ascend {va} (needs vLLM {row.vllm})",
                f"install vLLM {row.vllm}: {want}",
            )
        )
    else:
        out.append(CheckResult("compat.vllm", Status.PASS, f"vLLM {vllm} with vllm-ascend {va}"))

    key = cann_key(cann) if cann else None
    wanted = [k for k in (cann_key(c) for c in row.cann) if k is not None]
    if not cann or key is None:
        out.append(CheckResult("compat.cann", Status.SKIP, "CANN version unknown"))
    elif key in wanted:
        out.append(CheckResult("compat.cann", Status.PASS, f"CANN {cann} with vllm-ascend {va}"))
    else:
        older = key < min(wanted)
        out.append(
            CheckResult(
                "compat.cann",
                Status.FAIL if older else Status.WARN,
                f"CANN {cann} is {'too old' if older else 'not the tested version'} for "
                f"vllm-ascend {va} (needs CANN {' or '.join(row.cann)})",
                f"install CANN {row.cann[0]}: {want}; or {_fits(rows, 'CANN', cann)}",
            )
        )

    torch, npu = versions.get("torch"), versions.get("torch_npu")
    if not torch:
        out.append(CheckResult("compat.torch", Status.SKIP, "torch is not installed"))
    elif release(torch)[:3] != release(row.torch)[:3]:
        out.append(
            CheckResult(
                "compat.torch",
                Status.FAIL,
                f"torch {torch} does not fit vllm-ascend {va} (needs torch {row.torch})",
                f"install torch {row.torch} / torch_npu {row.torch_npu[0]}: {want}; "
                f"or {_fits(rows, 'torch', torch)}",
            )
        )
    else:
        out.append(CheckResult("compat.torch", Status.PASS, f"torch {torch} with vllm-ascend {va}"))

    if not npu or not torch:
        out.append(CheckResult("compat.torch_npu", Status.SKIP, "torch or torch_npu missing"))
    elif release(npu)[:3] != release(torch)[:3]:
        # torch_npu X.Y.Z[.postN] is built for torch X.Y.Z and for no other.
        out.append(
            CheckResult(
                "compat.torch_npu",
                Status.FAIL,
                f"torch_npu {npu} does not pair with torch {torch} "
                f"(torch_npu {'.'.join(map(str, release(npu)[:3]))} needs the same torch)",
                f"install torch {row.torch} / torch_npu {row.torch_npu[0]}: {want}",
            )
        )
    elif _norm(npu) not in {_norm(v) for v in row.torch_npu}:
        out.append(
            CheckResult(
                "compat.torch_npu",
                Status.WARN,
                f"torch_npu {npu} pairs with torch {torch} but vllm-ascend {va} was tested "
                f"with torch_npu {' or '.join(row.torch_npu)}",
                f"install torch_npu {row.torch_npu[0]}: {want}",
            )
        )
    else:
        out.append(
            CheckResult("compat.torch_npu", Status.PASS, f"torch_npu {npu} with torch {torch}")
        )
    return out
