"""Root causes across a chain of errors: which finding to name first.

One failure prints a chain: a version problem and then the NotImplementedError or engine
death it causes; one rank's failure and then every other rank's collective timeout; a device
fault and then the runtime errors on that device. Findings that follow each other closely
(a cascade) are ordered by how far up the chain their category sits, then by time; a cause
made only of generic codes (a driver's "internal error", 507899) comes after every specific
one, whose echo it usually is (the driver's "resource occupied", 87). Cascades keep their
time order. Findings of one category and subject in a cascade are one cause (a heartbeat
loss reported by the driver and by the runtime), named by its earliest line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ascend_doctor.core.events import Category, Finding, Role

CASCADE_SECONDS = 60.0
"""Findings closer than this (by their log timestamps) belong to one cascade."""
CASCADE_BYTES = 256 * 1024
"""Without timestamps: findings of one file closer than this many bytes are one cascade."""

# Lower sits higher up the chain: what makes the others happen.
TIER: dict[Category, int] = {
    Category.ENV_MISMATCH: 0,
    Category.DEVICE_FAULT: 0,
    Category.HOST_OOM: 0,
    # another process holding the device is a precondition as far up the chain as a faulty
    # device: the driver's queries then fail with its code (87, resource occupied) in
    # wordings that read as a driver or version problem (halGetDeviceInfo ... ret:87)
    Category.DEVICE_BUSY: 0,
    Category.DEVICE_UNAVAILABLE: 1,
    Category.PORT_IN_USE: 1,
    Category.NPU_OOM: 1,
    Category.KV_CACHE_INSUFFICIENT: 1,
    Category.MODEL_CONFIG_ERROR: 1,
    Category.NPU_RESOURCE_EXHAUSTED: 2,
    Category.GRAPH_CAPTURE_ERROR: 2,
    Category.AICORE_ERROR: 3,
    Category.HCCL_LINK_ERROR: 3,
    Category.HCCL_TIMEOUT: 4,
    Category.ENGINE_DEAD: 6,
    Category.SERVER_CRASHED: 6,
    Category.UNRECOGNISED: 7,
}
_DEFAULT_TIER = 5
INFERRED = "inferred:"
"""The rule prefix of a finding whose category was inferred (rules/infer.py ``PREFIX``)."""


@dataclass(frozen=True)
class Ranked:
    """A finding with where it sits: the time its line carries and its place in the input."""

    finding: Finding
    """The finding."""
    when: float | None
    """Epoch seconds of its log line, when the line carries a time."""
    order: tuple[int, int]
    """(file index, byte offset): the reading order."""


def tier(finding: Finding) -> int:
    """How far up the chain a finding's category sits (0: first). A category inferred from
    an error's words (rules/infer.py) sits where unrecognised errors do: it never names a
    cause, and ``diagnose`` lists it after every cause and before plain unrecognised errors."""
    if finding.rule.startswith(INFERRED):
        return TIER[Category.UNRECOGNISED]
    return TIER.get(finding.category, _DEFAULT_TIER)


def _same_cascade(a: Ranked, b: Ranked) -> bool:
    if a.when is not None and b.when is not None:
        return abs(b.when - a.when) <= CASCADE_SECONDS
    return a.order[0] == b.order[0] and abs(b.order[1] - a.order[1]) <= CASCADE_BYTES


def cascades(items: Sequence[Ranked]) -> list[list[Ranked]]:
    """Split time-ordered findings into cascades (a gap starts a new one)."""
    out: list[list[Ranked]] = []
    for item in items:
        if out and _same_cascade(out[-1][-1], item):
            out[-1].append(item)
        else:
            out.append([item])
    return out


def rank_causes(items: Sequence[Ranked]) -> list[list[Ranked]]:
    """Causes, most likely first; each cause is its findings, earliest first.

    ``items`` must be in reading order (time order across files). Roots are causes; when
    there is none, the symptoms that are not consequences of any failure (engine death,
    unexplained errors) stand in, so a log of timeouts alone still names its first one.
    """
    roots = [i for i in items if i.finding.role == Role.ROOT and tier(i.finding) < 7]
    if not roots:
        roots = [i for i in items if tier(i.finding) < 6]
    causes: list[list[Ranked]] = []
    for cascade in cascades(roots):
        groups: dict[tuple[Category, str], list[Ranked]] = {}
        for item in cascade:
            groups.setdefault((item.finding.category, item.finding.subject), []).append(item)
        _fold_device_reports(groups)
        ordered = sorted(
            groups.values(),
            key=lambda g: (_all_generic(g), tier(g[0].finding), g[0].order),
        )
        causes.extend(ordered)
    _hoist_device_faults(causes)
    return causes


def _hoist_device_faults(causes: list[list[Ranked]]) -> None:
    """A device fault explains the runtime errors on its device even when it is logged later
    than they are (the driver and device logs lag the server's output, and a device's clock
    is not the host's): it moves ahead of every earlier cause further down the chain that is
    about the same device or names none."""
    for index in range(len(causes)):
        f = causes[index][0].finding
        if f.category != Category.DEVICE_FAULT or _all_generic(causes[index]):
            continue  # generic codes alone ("driver internal error") explain nothing by themselves
        for earlier in range(index):
            e = causes[earlier][0].finding
            same_device = e.subject == f.subject or "server" in (e.subject, f.subject)
            if tier(e) > tier(f) and same_device:
                causes.insert(earlier, causes.pop(index))
                break


def _fold_device_reports(groups: dict[tuple[Category, str], list[Ranked]]) -> None:
    """A device fault reported without its device (torch_npu's "error code is 507010") and
    one named device's fault in the same cascade are one cause: the device's."""
    for category in (Category.DEVICE_FAULT, Category.DEVICE_UNAVAILABLE):
        loose = groups.get((category, "server"))
        named = [k for k in groups if k[0] == category and k[1] != "server"]
        if loose and len(named) == 1:
            groups[named[0]] = sorted(groups[named[0]] + loose, key=lambda i: i.order)
            del groups[(category, "server")]


def _all_generic(cause: list[Ranked]) -> bool:
    """A cause is generic when every finding of it is (a heartbeat loss named by a rule is
    specific even when a generic code of the same device was logged first)."""
    return all(_generic(i.finding) for i in cause)


def _generic(finding: Finding) -> bool:
    """A generic code or rule (its catalogue entry or rule says so), or any catalogued HCCL
    or dcmi code (internal codes of those libraries name no cause of their own)."""
    return finding.generic or finding.rule.startswith(("code:hccl:", "code:dcmi:"))


def first_cause(findings: Sequence[Finding]) -> Finding | None:
    """The finding that names the most likely root cause of one file's findings."""
    items = [Ranked(f, None, (0, f.offset)) for f in findings]
    causes = rank_causes(items)
    return causes[0][0].finding if causes else None


__all__ = [
    "CASCADE_BYTES",
    "CASCADE_SECONDS",
    "TIER",
    "Ranked",
    "cascades",
    "first_cause",
    "rank_causes",
    "tier",
]
