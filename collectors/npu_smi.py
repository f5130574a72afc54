"""The ``npu_smi`` collector: run Huawei's ``npu-smi`` and parse what it prints.

I/O and parsing are split: :func:`run_npu_smi` runs the binary with a hard timeout and returns
the raw text; :func:`parse_info`, :func:`parse_pairs` and :func:`dcmi_error` are pure functions
on that text, and they are what the unit tests feed with captured output.

The ``npu-smi info`` table is parsed by splitting rows on ``|`` and cells on whitespace, never by
character position: column widths differ between driver releases (24.1 prints 96 columns, 25.x
and later about 118) and wide numbers squeeze the ``used / total`` pairs (``53984/ 65536``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ascend_doctor.collectors.base import CollectorSpec
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.events import Sample

COLLECTOR = "npu_smi"
"""The registered collector name, used as ``Sample.collector``."""

HEALTH_STATES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
"""The health words ``npu-smi`` prints, in its own spelling."""

# After the group is killed, how long to wait for the leader to be reaped and the pipes to
# close. A process stuck in the driver (state D) ignores SIGKILL until its ioctl returns, so
# this wait is bounded too: the caller is promised that run_npu_smi never hangs.
_KILL_GRACE = 1.0

_DCMI_RET = re.compile(r"\bret is\s*(-?\d+)", re.IGNORECASE)
_NO_PROCS = re.compile(r"No running processes found in NPU\s+(\d+)", re.IGNORECASE)
_PAIR = re.compile(r"^\s*([^:]*[^:\s])\s*:\s*(.*?)\s*$")
_SLASH = re.compile(r"\s*/\s*")


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


RESET_ANSWERS = "Y\ny\n"
"""What the doctor types at ``npu-smi set -t reset``: yes to ``Are you sure you want to continue
resetting?(Y/N)`` and, on boards whose NPUs HCCS joins (Atlas 800T A2), yes to ``... it will
reboot all devices, do you want to continue reboot? [y/n]``. Only sent once every NPU the
reset may take was found idle or the server's own (npucli ``show_reset_risk``,
``check_confirm_info``)."""


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
        samples.append(Sample(collector=COLLECTOR, subject=subject, at=at, values=values))
    return samples


# -- running ---------------------------------------------------------------------------------


class _Capture(asyncio.SubprocessProtocol):
    """Collects output as it arrives, so a timed-out run still returns what it printed."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stdout: list[bytes] = []
        self.stderr: list[bytes] = []
        self.exited: asyncio.Future[None] = loop.create_future()
        """Done when the process has exited."""
        self.finished: asyncio.Future[None] = loop.create_future()
        """Done when the process has exited and every pipe is at EOF."""

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        (self.stdout if fd == 1 else self.stderr).append(data)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished.done():
            self.finished.set_result(None)


def _kill_group(pgid: int) -> None:
    # start_new_session made the child a group leader, so its pid is the group id; killing the
    # group also stops helpers it forked, which would otherwise hold our pipes open.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def run_npu_smi(
    path: str,
    args: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    answers: str | None = None,
) -> NpuSmiResult:
    """Run ``path args...`` (no shell) in its own process group, with a hard ``timeout``.

    ``answers`` is written to its stdin, then stdin is closed (npu-smi reads its confirmations
    there: a closed stdin answers none, so a reset aborts); without it stdin is /dev/null.

    On timeout the whole group is killed with SIGKILL and reaped, and the result has
    ``timed_out=True`` and ``returncode=None``; the call never waits much longer than
    ``timeout`` plus about a second. ``env`` replaces the environment when given. Raises
    :class:`CollectorError` when the binary is missing or not executable.
    """
    argv = (path, *args)
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    try:
        transport, capture = await loop.subprocess_exec(
            lambda: _Capture(loop),
            *argv,
            stdin=subprocess.DEVNULL if answers is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    except FileNotFoundError:
        raise CollectorError(f"npu-smi not found: {path}") from None
    except PermissionError:
        raise CollectorError(f"npu-smi not executable: {path}") from None
    except OSError as exc:
        raise CollectorError(f"npu-smi could not start: {path}: {exc.strerror or exc}") from None

    pid = transport.get_pid()
    if answers is not None:
        pipe = transport.get_pipe_transport(0)
        if isinstance(pipe, asyncio.WriteTransport):
            pipe.write(answers.encode())
            pipe.close()
    try:
        await asyncio.wait([capture.exited], timeout=max(timeout, 0.0))
        timed_out = not capture.exited.done()
        if timed_out:
            _kill_group(pid)
        # After the exit, wait briefly for the last output; a helper that escaped the group
        # (setsid) may hold the pipes open forever, and we do not wait for it.
        await asyncio.wait([capture.finished], timeout=_KILL_GRACE)
    finally:
        # Also runs when the caller cancels us: never leave the group or the pipes behind,
        # and reap the leader (bounded: a process stuck in the driver ignores SIGKILL).
        if not capture.exited.done():
            _kill_group(pid)
            await asyncio.wait([capture.exited], timeout=_KILL_GRACE)
        transport.close()

    return NpuSmiResult(
        argv=argv,
        returncode=None if timed_out else transport.get_returncode(),
        stdout=b"".join(capture.stdout).decode("utf-8", errors="replace"),
        stderr=b"".join(capture.stderr).decode("utf-8", errors="replace"),
        duration=time.monotonic() - started,
        timed_out=timed_out,
    )


# -- the collector ---------------------------------------------------------------------------


USAGE_KEYS = {
    "HBM Usage Rate(%)": "hbm_usage_rate_pct",
    "Aicore Usage Rate(%)": "aicore_usage_rate_pct",
    "Aivector Usage Rate(%)": "aivector_usage_rate_pct",
    "NPU Utilization(%)": "npu_utilization_pct",
    "HBM Bandwidth Usage Rate(%)": "hbm_bandwidth_usage_rate_pct",
}
"""``npu-smi info -t usages`` pairs kept, by sample value name."""


class NpuSmiCollector:
    """One ``npu-smi info`` per run, plus ``-t health`` for devices that are not OK.

    Output that does not parse is counted and its last raw text kept (``last_raw``) for
    whoever debugs the parser; a dcmi return code (-8005, -8020, ...) is kept in
    ``last_dcmi`` with the text that carried it, for the rules to read.
    """

    name = COLLECTOR

    def __init__(self, binary: str, *, timeout: float, usages: bool = False) -> None:
        self.binary = binary
        self.timeout = timeout
        self.usages = usages
        self.parse_failures = 0
        self.last_raw = ""
        self.last_dcmi: tuple[int, str] | None = None

    async def collect(self) -> list[Sample]:
        """Samples of every chip; CollectorError when npu-smi fails, hangs or says nothing."""
        # an observation is as old as the moment it began: a sample taken while a device was
        # being reset must not count as the fault coming back after the restart
        started = time.time()
        res = await run_npu_smi(self.binary, ["info"], timeout=self.timeout)
        if res.timed_out:
            raise CollectorError(f"npu-smi info timed out after {self.timeout:g}s; killed")
        text = res.stdout + res.stderr
        code = dcmi_error(text)
        if code is not None:
            self.last_dcmi = (code, text.strip()[-2000:])
            raise CollectorError(
                f"npu-smi info: dcmi error {code}", raw=text[-8192:], evidence=self.last_dcmi[1]
            )
        try:
            info = parse_info(res.stdout)
        except CollectorError as exc:
            self.parse_failures += 1
            self.last_raw = text[-8192:]
            raise CollectorError(str(exc), raw=self.last_raw) from None
        samples = samples_from_info(info, started)
        out = []
        for sample in samples:
            if sample.values.get("health") not in ("OK", None):
                sample = await self._with_health_detail(sample)
            if self.usages and "." not in sample.subject:
                sample = await self._with_usages(sample)
            out.append(sample)
        return out

    async def _with_usages(self, sample: Sample) -> Sample:
        """``info -t usages -i N``: rates npu-smi info does not print (vector core, bandwidth)."""
        npu = sample.subject.removeprefix("npu")
        try:
            res = await run_npu_smi(
                self.binary, ["info", "-t", "usages", "-i", npu], timeout=self.timeout
            )
        except CollectorError:
            return sample
        extra: dict[str, object] = {}
        for key, value in parse_pairs(res.stdout).items():
            name = USAGE_KEYS.get(key)
            if name is not None:
                try:
                    extra[name] = int(value)
                except ValueError:
                    continue
        return Sample(sample.collector, sample.subject, sample.at, {**sample.values, **extra})

    async def _with_health_detail(self, sample: Sample) -> Sample:
        npu, _, chip = sample.subject.removeprefix("npu").partition(".")
        args = ["info", "-t", "health", "-i", npu, "-c", chip or "0"]
        try:
            res = await run_npu_smi(self.binary, args, timeout=self.timeout)
        except CollectorError:
            return sample
        pairs = parse_pairs(res.stdout)
        extra = {
            "health_error_code": pairs.get("Error Code"),
            "health_error_info": pairs.get("Error Information"),
        }
        return Sample(sample.collector, sample.subject, sample.at, {**sample.values, **extra})


SPEC = CollectorSpec(
    name=COLLECTOR,
    build=lambda ctx: NpuSmiCollector(
        ctx.npu_smi, timeout=ctx.config.npu_smi.timeout, usages=ctx.config.npu_smi.usages
    ),
    enabled=lambda cfg: cfg.npu_smi.enabled,
    interval=lambda cfg: cfg.npu_smi.interval,
)
"""The ``npu_smi`` collector as registered."""


__all__ = [
    "COLLECTOR",
    "HEALTH_STATES",
    "RESET_ANSWERS",
    "SPEC",
    "NpuDevice",
    "NpuInfo",
    "NpuProcess",
    "NpuSmiCollector",
    "NpuSmiResult",
    "ResetResult",
    "dcmi_error",
    "parse_info",
    "parse_pairs",
    "parse_reset",
    "run_npu_smi",
    "samples_from_info",
]
