"""The ``npu_smi`` collector: run Huawei's ``npu-smi`` and parse what it prints.

I/O and parsing are split: :func:`run_npu_smi` runs the binary with a hard timeout and returns
the raw text; the pure functions on that text (:func:`parse_info`, :func:`parse_pairs`,
:func:`dcmi_error`) are in ``npu_smi_format.py``, and they are what the unit tests feed with
captured output. Both are importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from ascend_doctor.collectors.base import CollectorSpec
from ascend_doctor.collectors.npu_smi_ecc import ecc_subjects, parse_ecc
from ascend_doctor.collectors.npu_smi_format import (
    CHIP_RESET_ANSWERS,
    COLLECTOR,
    HEALTH_STATES,
    RESET_ANSWERS,
    NpuDevice,
    NpuInfo,
    NpuProcess,
    NpuSmiResult,
    ResetResult,
    board_identity,
    dcmi_error,
    parse_info,
    parse_pairs,
    parse_reset,
    reset_command,
    samples_from_info,
)
from ascend_doctor.collectors.trend import Trend
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.events import Sample

_KILL_GRACE = 1.0
MAX_OUTPUT = 4 << 20
"""Bytes kept of each of npu-smi's streams; the rest is dropped unread: 400 MB of output (a
driver gone wrong) must not block the daemon's loop while it is joined and parsed."""


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
        kept = self.stdout if fd == 1 else self.stderr
        room = MAX_OUTPUT - sum(map(len, kept)) if len(kept) < 4096 else 0
        if room > 0:
            kept.append(data[:room])

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


def npu_smi_binary(path: str, env: Mapping[str, str]) -> str:
    """The npu-smi binary as the server's ``PATH`` finds it (``path`` itself otherwise)."""
    return shutil.which(path, path=env.get("PATH")) or path


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
        # and reap the leader (bounded: a process stuck in the driver ignores SIGKILL). A
        # second cancellation (a shutdown) may end the wait: the transport is closed anyway.
        try:
            if not capture.exited.done():
                _kill_group(pid)
                await asyncio.wait([capture.exited], timeout=_KILL_GRACE)
        finally:
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


class EccReader:
    """``npu-smi info -t ecc -i N`` for every card, at most every ``interval`` seconds (one
    process per card: the counters change rarely, the main table is read far more often).
    The last counters of each chip are kept, so every sample carries them."""

    def __init__(
        self, binary: str, *, timeout: float, interval: float, clock: Callable[[], float]
    ) -> None:
        self.binary = binary
        self.timeout = timeout
        self.interval = interval
        self._clock = clock
        self._read_at: float | None = None
        self.last: dict[str, dict[str, int]] = {}
        """The counters by subject (``npu3``, ``npu3.1``)."""

    async def read(self, cards: list[int]) -> dict[str, dict[str, int]]:
        """The counters, read again when ``interval`` has passed; a card that cannot be
        read keeps its last counters (or has none)."""
        now = self._clock()
        if self.interval <= 0 or (
            self._read_at is not None and now - self._read_at < self.interval
        ):
            return self.last
        self._read_at = now

        async def one(npu: int) -> dict[str, dict[str, int]]:
            args = ["info", "-t", "ecc", "-i", str(npu)]
            try:
                res = await run_npu_smi(self.binary, args, timeout=self.timeout)
            except CollectorError:
                return {}
            return ecc_subjects(npu, parse_ecc(res.stdout)) if res.returncode == 0 else {}

        for found in await asyncio.gather(*(one(n) for n in cards)):
            self.last.update(found)
        return self.last


class NpuSmiCollector:
    """One ``npu-smi info`` per run, plus ``-t health`` for devices that are not OK, and each
    card's ``-t ecc`` counters every ``ecc_interval`` seconds (``EccReader``).

    Output that does not parse is counted and its last raw text kept (``last_raw``) for
    whoever debugs the parser; a dcmi return code (-8005, -8020, ...) is kept in
    ``last_dcmi`` with the text that carried it, for the rules to read.
    """

    name = COLLECTOR

    def __init__(
        self,
        binary: str,
        *,
        timeout: float,
        usages: bool = False,
        board: bool = True,
        trend_window: float = 3600.0,
        serving: Callable[[], bool] = lambda: True,
        ecc_interval: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.binary = binary
        self.timeout = timeout
        self.usages = usages
        self.board = board
        """Read each chip's board identity once (``model_name``, ``vdie_id``)."""
        self._serving = serving
        self.trend_window = trend_window
        self.trends: dict[str, Trend] = {}
        """Each chip's HBM trend, while the same processes hold it."""
        self.parse_failures = 0
        self.last_raw = ""
        self.last_dcmi: tuple[int, str] | None = None
        self._boards: dict[str, dict[str, str]] = {}
        self.ecc = EccReader(binary, timeout=timeout, interval=ecc_interval, clock=clock)
        """Each card's ECC counters, read every ``ecc_interval`` and kept on every sample."""

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
        if self.board:
            await self._read_boards([s.subject for s in samples if s.subject not in self._boards])
        ecc = await self.ecc.read(sorted({d.npu for d in info.devices}))
        out = []
        for sample in samples:
            if sample.subject in ecc:
                sample = Sample(sample.collector, sample.subject, sample.at,
                                {**sample.values, **ecc[sample.subject]})  # fmt: skip
            if sample.values.get("health") not in ("OK", None):
                sample = await self._with_health_detail(sample)
            if self.usages and "." not in sample.subject:
                sample = await self._with_usages(sample)
            board = self._boards.get(sample.subject)
            if board:
                sample = Sample(sample.collector, sample.subject, sample.at,
                                {**sample.values, **board})  # fmt: skip
            out.append(self._with_trend(sample))
        return out

    async def _read_boards(self, subjects: list[str]) -> None:
        """``info -t board -i N -c C`` once per chip and doctor run: the identity NPU Exporter
        labels its series with (``model_name``, ``vdie_id``). A chip whose board cannot be
        read goes without them; it is not asked again."""
        if not subjects:
            return

        async def one(subject: str) -> dict[str, str]:
            npu, _, chip = subject.removeprefix("npu").partition(".")
            args = ["info", "-t", "board", "-i", npu, "-c", chip or "0"]
            try:
                res = await run_npu_smi(self.binary, args, timeout=self.timeout)
            except CollectorError:
                return {}
            return board_identity(parse_pairs(res.stdout))

        found = await asyncio.gather(*(one(s) for s in subjects))
        self._boards.update(zip(subjects, found, strict=True))

    def _with_trend(self, sample: Sample) -> Sample:
        """HBM growth and the time to a full card, for a card the same processes hold."""
        used, total, pids = (sample.values.get(k) for k in ("hbm_used_mb", "hbm_total_mb", "pids"))
        if (
            not isinstance(used, int)
            or not isinstance(total, int)
            or not pids
            or not self._serving()
        ):
            self.trends.pop(sample.subject, None)
            return sample
        trend = self.trends.setdefault(sample.subject, Trend(self.trend_window))
        est = trend.add(sample.at, float(used), float(total), tuple(sorted(pids)))
        if est is None:
            return sample
        extra = {"hbm_growth_mb_per_h": est.growth_per_hour, "hbm_oom_eta_s": est.eta_s}
        return Sample(sample.collector, sample.subject, sample.at, {**sample.values, **extra})

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
        ctx.npu_smi,
        timeout=ctx.config.npu_smi.timeout,
        usages=ctx.config.npu_smi.usages,
        trend_window=ctx.config.npu_smi.trend_window,
        serving=ctx.serving,
        ecc_interval=ctx.config.npu_smi.ecc_interval,
    ),
    enabled=lambda cfg: cfg.npu_smi.enabled,
    interval=lambda cfg: cfg.npu_smi.interval,
)
"""The ``npu_smi`` collector as registered."""


__all__ = [
    "CHIP_RESET_ANSWERS",
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
    "npu_smi_binary",
    "parse_info",
    "parse_pairs",
    "parse_reset",
    "reset_command",
    "run_npu_smi",
    "samples_from_info",
]
