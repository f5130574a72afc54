"""The text ``npu-smi`` prints, parsed: pure functions on captured output (what the unit
tests feed), for the ``npu_smi`` collector, remediation's holder checks and ``check``.

The ``npu-smi info`` table is parsed by splitting rows on ``|`` and cells on whitespace, never by
character position: column widths differ between driver releases (24.1 prints 96 columns, 25.x
and later about 118) and wide numbers squeeze the ``used / total`` pairs (``53984/ 65536``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ascend_doctor.core import regex
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.events import Sample

COLLECTOR = "npu_smi"
"""The registered collector name, used as ``Sample.collector``."""

HEALTH_STATES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
"""The health words ``npu-smi`` prints, in its own spelling."""

# After the group is killed, how long to wait for the leader to be reaped and the pipes to
# close. A process stuck in the driver (state D) ignores SIGKILL until its ioctl returns, so
# this wait is bounded too: the caller is promised that run_npu_smi never hangs.

_DCMI_RET = regex.compile(r"\bret is\s*(-?\d+)", re.IGNORECASE)
_NO_PROCS = regex.compile(r"No running processes found in NPU\s+(\d+)", re.IGNORECASE)
_PAIR = regex.compile(r"^\s*([^:]*[^:\s])\s*:\s*(.*?)\s*$")
_HEX_WORD = regex.compile(r"[0-9A-Fa-f]{1,8}")
_SLASH = regex.compile(r"\s*/\s*")


@dataclass(frozen=True, slots=True)
class NpuDevice:
    """One chip as ``npu-smi info`` shows it (one per NPU on 910B, two per NPU on A3)."""

    npu: int
    """NPU id (the ``-i`` argument of ``npu-smi``)."""
    chip: int
    """Chip id within the NPU (the ``-c`` argument); always 0 on 910B."""
    name: str
    """Chip name as printed: ``910B3``, ``910B4-1``, ``Ascend910`` (A3)..."""
    health: str
    """``OK``, ``Warning``, ``Alarm``, ``Critical`` or ``UNKNOWN``."""
    power_w: float | None
    """Board power in watts; None when printed as ``-`` (second chip of an A3 NPU) or NA."""
    temp_c: int | None
    """Chip temperature in degrees Celsius; None when not printed."""
    aicore_pct: int | None
    """AI Core utilisation in percent; None when not printed."""
    hbm_used_mb: int | None
    """HBM in use, MB; None when the layout has no HBM column."""
    hbm_total_mb: int | None
    """HBM capacity, MB; None when the layout has no HBM column."""
    bus_id: str
    """PCI address such as ``0000:C1:00.0`` (``NA`` when npu-smi does not know it)."""
    hugepages_used: int | None
    """Huge pages in use; None when not printed."""
    hugepages_total: int | None
    """Huge pages reserved; None when not printed."""
    chip_phy_id: int | None = None
    """Physical chip id from the A3 ``Chip Phy-ID`` column; None on layouts without it."""


@dataclass(frozen=True, slots=True)
class NpuProcess:
    """One process holding device memory, from the process table of ``npu-smi info``."""

    npu: int
    """NPU id the process runs on."""
    chip: int
    """Chip id within that NPU."""
    pid: int
    """The ``Process id`` column: the PID in the host's namespace."""
    name: str
    """Process name as printed (truncated by npu-smi to about 15 characters)."""
    memory_mb: int | None
    """Device memory held, MB; None when not printed."""


@dataclass(frozen=True, slots=True)
class NpuInfo:
    """Everything one ``npu-smi info`` table says."""

    version: str
    """npu-smi (driver) version from the title row, e.g. ``24.1.rc2``; "" when absent."""
    devices: tuple[NpuDevice, ...]
    """Chips in table order."""
    processes: tuple[NpuProcess, ...]
    """Processes in table order."""

    def processes_on(self, npu: int) -> list[NpuProcess]:
        """The processes on NPU ``npu``, on any of its chips."""
        return [p for p in self.processes if p.npu == npu]


@dataclass(frozen=True, slots=True)
class NpuSmiResult:
    """What one run of ``npu-smi`` produced."""

    argv: tuple[str, ...]
    """The command as executed: the binary, then its arguments."""
    returncode: int | None
    """Exit status; None when it timed out and was killed."""
    stdout: str
    """Standard output (invalid UTF-8 replaced); partial when it timed out."""
    stderr: str
    """Standard error (invalid UTF-8 replaced); partial when it timed out."""
    duration: float
    """Wall time of the run in seconds (monotonic clock)."""
    timed_out: bool
    """True when the timeout expired and the process group was killed."""


# -- parsing ---------------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    """The stripped cells of one ``| a | b |`` row."""
    body = line.strip()
    body = body.removeprefix("|").removesuffix("|")
    return [cell.strip() for cell in body.split("|")]


def _tokens(cell: str) -> list[str]:
    """Whitespace tokens of a cell, with ``a / b`` (or ``a/ b``) glued into one ``a/b`` token."""
    return _SLASH.sub("/", cell).split()


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _pair(token: str | None) -> tuple[int | None, int | None]:
    """``3402/65536`` -> (3402, 65536); anything else -> (None, None)."""
    if token is None or "/" not in token:
        return None, None
    used, _, total = token.partition("/")
    return _int(used), _int(total)


def _health(text: str) -> str:
    for state in HEALTH_STATES:
        if text.casefold() == state.casefold():
            return state
    return "UNKNOWN"


def _fail(why: str, line: str | None = None) -> CollectorError:
    if line is None:
        return CollectorError(f"npu-smi info: {why}")
    return CollectorError(f"npu-smi info: {why}: {line.strip()!r}")


def _as_int(text: str, what: str, line: str) -> int:
    value = _int(text)
    if value is None:
        raise _fail(f"{what} is {text!r}: expected an integer", line)
    return value


@dataclass(slots=True)
class _TopRow:
    """The first row of a device: NPU, name, health, power, temperature, huge pages."""

    npu: int
    name: str
    health: str
    power_w: float | None
    temp_c: int | None
    hugepages: tuple[int | None, int | None]


def _parse_top_row(cells: list[str], line: str) -> _TopRow:
    head = cells[0].split()
    if not head:
        raise _fail("device row has no NPU id", line)
    npu = _as_int(head[0], "NPU id", line)
    values = _tokens(cells[2])
    pairs = [t for t in values if "/" in t]
    singles = [t for t in values if "/" not in t]
    return _TopRow(
        npu=npu,
        name=" ".join(head[1:]),
        health=_health(cells[1]),
        power_w=_float(singles[0]) if singles else None,
        temp_c=_int(singles[1]) if len(singles) > 1 else None,
        hugepages=_pair(pairs[0] if pairs else None),
    )


def _parse_chip_row(top: _TopRow, cells: list[str], line: str, *, has_hbm: bool) -> NpuDevice:
    head = cells[0].split()
    if not head:
        raise _fail(f"chip row of NPU {top.npu} has no chip id", line)
    chip = _as_int(head[0], "chip id", line)
    phy = _as_int(head[1], "chip Phy-ID", line) if len(head) > 1 else None
    values = _tokens(cells[2])
    pairs = [t for t in values if "/" in t]
    singles = [t for t in values if "/" not in t]
    # Memory-Usage (host-side DDR) comes before HBM-Usage; layouts without HBM print one pair.
    hbm_used, hbm_total = _pair(pairs[-1] if has_hbm and pairs else None)
    return NpuDevice(
        npu=top.npu,
        chip=chip,
        name=top.name,
        health=top.health,
        power_w=top.power_w,
        temp_c=top.temp_c,
        aicore_pct=_int(singles[0]) if singles else None,
        hbm_used_mb=hbm_used,
        hbm_total_mb=hbm_total,
        bus_id=cells[1],
        hugepages_used=top.hugepages[0],
        hugepages_total=top.hugepages[1],
        chip_phy_id=phy,
    )


def _parse_process_row(cells: list[str], line: str) -> NpuProcess:
    if len(cells) < 4:
        raise _fail("process row has fewer than 4 columns", line)
    head = cells[0].split()
    if len(head) < 2:
        raise _fail("process row has no NPU and chip ids", line)
    return NpuProcess(
        npu=_as_int(head[0], "NPU id", line),
        chip=_as_int(head[1], "chip id", line),
        pid=_as_int(cells[1], "process id", line),
        name=cells[2],
        memory_mb=_int(cells[3]),
    )


def parse_info(text: str) -> NpuInfo:
    """Parse the table of ``npu-smi info``.

    Handles the 910B layout (one chip per NPU), the A3 layout (two chips per NPU, a
    ``Chip Phy-ID`` column, ``-`` for the second chip's power), both process tables (with and
    without ``Process id in container``) and ``No running processes found in NPU N`` rows.
    Raises :class:`CollectorError` (``npu-smi info: ...``) when the text is not such a table or
    a row of it cannot be read.
    """
    version = ""
    devices: list[NpuDevice] = []
    processes: list[NpuProcess] = []
    seen_table = False
    section = ""  # "" before any header, then "devices" or "processes"
    has_hbm = True
    top: _TopRow | None = None

    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("|"):
            continue  # borders (+---+, +===+), blank lines, banners
        cells = _cells(stripped)
        first = cells[0]
        if first.startswith("npu-smi"):
            seen_table = True
            _, _, after = first.partition("Version:")
            words = (after or first.removeprefix("npu-smi")).split()
            version = words[0] if words else ""
            continue
        if len(cells) >= 2 and cells[1].startswith("Health"):
            seen_table, section, top = True, "devices", None
            continue
        if len(cells) >= 2 and cells[1].startswith("Bus-Id"):
            has_hbm = "HBM" in stripped
            continue
        if "Process id" in stripped and "Process name" in stripped:
            if top is not None:
                raise _fail(f"device row of NPU {top.npu} has no chip row")
            seen_table, section = True, "processes"
            continue
        if _NO_PROCS.search(stripped):
            continue
        if section == "devices":
            if len(cells) < 3:
                raise _fail("device row has fewer than 3 columns", line)
            if top is None:
                top = _parse_top_row(cells, line)
            else:
                devices.append(_parse_chip_row(top, cells, line, has_hbm=has_hbm))
                top = None
        elif section == "processes":
            processes.append(_parse_process_row(cells, line))

    if not seen_table:
        code = dcmi_error(text)
        if code is not None:
            raise _fail(f"dcmi error {code}")
        snippet = text.strip().splitlines()[0][:80] if text.strip() else ""
        raise _fail(f"not an npu-smi table (starts {snippet!r})")
    if top is not None:
        raise _fail(f"device row of NPU {top.npu} has no chip row")
    return NpuInfo(version=version, devices=tuple(devices), processes=tuple(processes))


def parse_pairs(text: str) -> dict[str, str]:
    """Parse ``Name : value`` lines (``npu-smi info -t health|usages|board``).

    The name ends at the first colon, so values may hold colons (``0000:C1:00.0``). Lines
    without a colon are skipped; when a name repeats, the first value is kept.
    """
    pairs: dict[str, str] = {}
    for line in text.splitlines():
        match = _PAIR.match(line)
        if match is not None:
            pairs.setdefault(match.group(1), match.group(2))
    return pairs


def board_identity(pairs: dict[str, str]) -> dict[str, str]:
    """``model_name`` and ``vdie_id`` from ``npu-smi info -t board`` pairs, in the form Huawei
    NPU Exporter gives them (mind-cluster ``ascend-common/devmanager/common/utils.go``
    GetNpuName: ``<name>-<type>-<version>``; ``devmanager/dcmi/dcmi.go`` DcGetDieID: the
    words upper-case, 8 digits each, joined by ``-``). Missing fields are left out."""
    out: dict[str, str] = {}
    parts = [pairs.get(k, "").strip() for k in ("Chip Name", "Chip Type", "Chip Version")]
    if all(p and p != "NA" for p in parts):
        out["model_name"] = "-".join(parts)
    words = pairs.get("VDie ID", "").split()
    if words and all(_HEX_WORD.fullmatch(w) for w in words):
        out["vdie_id"] = "-".join(w.upper().zfill(8) for w in words)
    return out


RESET_ANSWERS = "Y\ny\n"
"""What the doctor types at ``npu-smi set -t reset``: yes to ``Are you sure you want to continue
resetting?(Y/N)`` and, on boards whose NPUs HCCS joins (Atlas 800T A2), yes to ``... it will
reboot all devices, do you want to continue reboot? [y/n]``. Only sent once every NPU the
reset may take was found idle or the server's own (npucli ``show_reset_risk``,
``check_confirm_info``)."""

CHIP_RESET_ANSWERS = "Y\n"
"""With ``remediation.reset_scope = "chip"``: yes to the first question only. On a board that
asks the second (HCCS on: every NPU would reset) stdin is closed, npu-smi reads EOF and the
reset aborts (exit 211) instead of taking down the other servers' cards."""


@dataclass(frozen=True, slots=True)
class ResetResult:
    """What ``npu-smi set -t reset`` reported."""

    status: str
    """``OK`` or ``Fail`` (the last ``Status`` line); "" when none was printed."""
    message: str
    """The last ``Message`` line (``Reset server successfully.``, ``User aborts reset server by
    inband.``, ``Failed to reset server``...); "" when none was printed."""
    board: bool
    """npu-smi said the reset takes every device (``it will reboot all devices``)."""


def parse_reset(text: str) -> ResetResult:
    """Parse the output of ``npu-smi set -t reset`` (prompts, then ``Status``/``Message``)."""
    status = message = ""
    for line in text.splitlines():
        match = _PAIR.match(line)
        if match is None:
            continue
        if match.group(1) == "Status":
            status = match.group(2)
        elif match.group(1) == "Message":
            message = match.group(2)
    return ResetResult(status, message, "reboot all devices" in text)


def dcmi_error(text: str) -> int | None:
    """The ``ret is N`` code of a DCMI failure line (``dcmi module initialize failed. ret is
    -8005``, ``... because the device is used. ret is -8020``), else None."""
    match = _DCMI_RET.search(text)
    return int(match.group(1)) if match is not None else None


def samples_from_info(info: NpuInfo, at: float) -> list[Sample]:
    """One :class:`Sample` per chip: subject ``npu<N>``, or ``npu<N>.<chip>`` for chips > 0."""
    samples: list[Sample] = []
    for dev in info.devices:
        subject = f"npu{dev.npu}" if dev.chip == 0 else f"npu{dev.npu}.{dev.chip}"
        pids = [p.pid for p in info.processes if p.npu == dev.npu and p.chip == dev.chip]
        values: dict[str, object] = {
            "health": dev.health,
            "hbm_used_mb": dev.hbm_used_mb,
            "hbm_total_mb": dev.hbm_total_mb,
            "hbm_used_pct": (
                round(100.0 * dev.hbm_used_mb / dev.hbm_total_mb, 1)
                if dev.hbm_used_mb is not None and dev.hbm_total_mb
                else None
            ),
            "power_w": dev.power_w,
            "temp_c": dev.temp_c,
            "aicore_pct": dev.aicore_pct,
            "bus_id": dev.bus_id,
            "name": dev.name,
            "pids": pids,
            "driver_version": info.version,
        }
        if dev.chip_phy_id is not None:
            values["phy_id"] = dev.chip_phy_id
        samples.append(Sample(collector=COLLECTOR, subject=subject, at=at, values=values))
    return samples


def reset_command(device: int | None, chip: int = 0) -> list[str]:
    """The npu-smi command that resets a device (``N`` where the device is not known)."""
    target = "N" if device is None else str(device)
    return ["npu-smi", "set", "-t", "reset", "-i", target, "-c", str(chip)]


# -- running ---------------------------------------------------------------------------------


__all__ = [
    "CHIP_RESET_ANSWERS",
    "COLLECTOR",
    "HEALTH_STATES",
    "RESET_ANSWERS",
    "NpuDevice",
    "NpuInfo",
    "NpuProcess",
    "NpuSmiResult",
    "ResetResult",
    "board_identity",
    "dcmi_error",
    "parse_info",
    "parse_pairs",
    "parse_reset",
    "reset_command",
    "samples_from_info",
]
