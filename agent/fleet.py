"""Several servers under one doctor: the gate every planned stop passes, and what each server
is to it.

The deployment guide's layout puts two vLLM-Ascend instances behind one nginx. A remediation
stops its server; two doctors that knew nothing of each other could stop both at once. Here
every server's planned stop (a restart for a step, a relaunch with new flags, a device reset)
asks :class:`HAGate` first: it waits while fewer than ``[ha] min_healthy`` of the other servers
are healthy (a server that already died has nothing left to protect and is not asked about),
takes the server out of the balancer (``drain_command``) and, once the server answers a
completion again after its start, puts it back (``undrain_command``). Who may stop is the pure
policy of ``core/ha.py``; this module waits, runs the commands and says what it decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from ascend_doctor.agent.server import ServerHandle
from ascend_doctor.agent.verify import completion_probe
from ascend_doctor.core import regex
from ascend_doctor.core.errors import RemediationError
from ascend_doctor.core.events import Finding, Outcome, ProcessState, Sample
from ascend_doctor.core.ha import HAConfig, device_number, may_stop, required_healthy, substitute

log = logging.getLogger(__name__)

Decide = Callable[[str, Outcome, str, dict[str, Any]], None]
"""Records a decision (name, outcome, reason, params) on what the server is being fixed for."""

_PLOG_PID = regex.compile(r"^(?:plog|device)-(\d+)_")
_DEVICE_DIR = regex.compile(r"^device-(\d+)$")


class StopRefused(RemediationError):
    """A planned stop may not happen: the other servers are not healthy, or the drain failed."""


def log_owner(path: str) -> tuple[int | None, int | None]:
    """(pid, device) a CANN log file belongs to, from its name: ``plog/plog-PID_STAMP.log``,
    ``device-N/device-PID_STAMP.log`` (CANN names each process's log after its pid)."""
    p = PurePath(path)
    pid = _PLOG_PID.match(p.name)
    dev = _DEVICE_DIR.match(p.parent.name)
    return (int(pid.group(1)) if pid else None, int(dev.group(1)) if dev else None)


@dataclass
class Member:
    """One of several servers, as the gate and the shared log root see it."""

    name: str
    """Its ``[[servers]]`` name."""
    url: str
    """Base URL of its API."""
    devices: Sequence[int]
    """Its cards (``ASCEND_RT_VISIBLE_DEVICES``)."""
    handle: ServerHandle | None = None
    """Its server, once the daemon built it."""
    decide: Decide = field(default=lambda name, outcome, reason, params: None)
    """Where its gate decisions are recorded (the incidents being fixed)."""
    drained: bool = False
    """Its drain command ran and no undrain since."""
    serving: bool = False
    """It answered a completion since it last started and is back in the balancer: only
    then may another server be stopped on its account."""
    ours: Callable[[int], bool] = field(default=lambda pid: False)
    """Whether a pid is (or was) one of its server's processes."""
    peers: list[Member] = field(default_factory=list)
    """The other servers under the same doctor."""
    gate: HAGate | None = None
    """The gate its planned stops pass."""

    @property
    def running(self) -> bool:
        """Its server is RUNNING (it may not answer yet)."""
        return self.handle is not None and self.handle.state == ProcessState.RUNNING

    @property
    def healthy(self) -> bool:
        """Serving: running, answering /health, and put back after its last start."""
        return self.serving and self.handle is not None and self.handle.healthy

    def owns(self, finding: Finding) -> bool:
        """Whether a finding from a log root shared with other servers is about this one: a
        CANN file named after a pid of another server's tree, or kept under another server's
        card, is not. A file that names neither (the server's own log) is, and so is one no
        server claims: a duplicate is better than a lost fault."""
        pid, device = log_owner(finding.path)
        if pid is not None and self.ours(pid):
            return True
        if pid is not None and any(p.ours(pid) for p in self.peers):
            return False
        if device is not None and device not in self.devices:
            return not any(device in p.devices for p in self.peers)
        return True

    def keeps(self, sample: Sample) -> bool:
        """Whether a sample is about this server (npu-smi samples of its own cards only)."""
        npu = device_number(sample.subject)
        return npu is None or not self.devices or npu in self.devices


Run = Callable[[Sequence[str], float], Awaitable[tuple[int | None, str]]]


async def run_argv(argv: Sequence[str], timeout: float) -> tuple[int | None, str]:
    """Run ``argv`` (no shell); (exit status or None when it did not finish, output tail)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        return 127, f"cannot run {argv[0]}: {exc.strerror or exc}"
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return None, f"did not finish in {timeout:g}s"
    return proc.returncode, out.decode(errors="replace").strip()[-300:]


class HAGate:
    """Every planned stop of one of several servers passes here."""

    def __init__(
        self,
        ha: HAConfig,
        *,
        run: Run = run_argv,
        probe: Callable[[str, float], Awaitable[tuple[bool, str]]] = completion_probe,
        clock: Callable[[], float] = time.monotonic,
        recheck: float = 1.0,
    ) -> None:
        self.ha = ha
        self.members: dict[str, Member] = {}
        self.held: set[str] = set()
        """Servers that passed the gate and have not answered a completion since."""
        self._run = run
        self._probe = probe
        self._clock = clock
        self._recheck = recheck  # /health failures change no state: look again this often
        self._changed: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, member: Member) -> None:
        """One more server under the gate."""
        for other in self.members.values():
            other.peers.append(member)
            member.peers.append(other)
        member.gate = self
        self.members[member.name] = member

    def started(self, name: str) -> None:
        """The server reached RUNNING: put it back once it answers (a task of the gate's)."""
        task = asyncio.get_running_loop().create_task(self.after_start(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Cancel what still waits for a server to answer."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def required(self) -> int:
        """Other servers that must be healthy for a planned stop."""
        return required_healthy(self.ha, len(self.members))

    def changed(self, name: str = "", running: bool = True) -> None:
        """A server's state changed (``name`` left RUNNING: it serves no more until it
        answers again): waiting stops look again."""
        if name and not running:
            self.members[name].serving = False
        if self._changed is not None:
            self._changed.set()

    async def before_stop(self, name: str, reason: str) -> None:
        """Wait until ``name`` may be stopped, then drain it; StopRefused when it may not."""
        member = self.members[name]
        started, waited = self._clock(), False
        while True:
            healthy = {n: m.healthy for n, m in self.members.items()}
            verdict = may_stop(name, healthy, sorted(self.held), self.required)
            if verdict.allowed:
                break
            if not waited:
                waited = True
                member.decide("ha_wait", Outcome.REFUSED, f"{reason} waits: {verdict.reason}", {})
            if self._clock() - started >= self.ha.max_wait:
                why = f"no stop after {self.ha.max_wait:g}s of waiting: {verdict.reason}"
                member.decide("ha_wait", Outcome.REFUSED, why, {})
                raise StopRefused(why)
            await self._wait_change()
        self.held.add(name)  # from here the others count it as down
        was, member.serving = member.serving, False
        params = {"healthy": list(verdict.healthy), "required": self.required}
        if waited:
            params["waited_s"] = round(self._clock() - started, 1)
        member.decide("ha_stop", Outcome.OK, f"{reason}: {verdict.reason}", params)
        try:
            await self._drain(member)
        except StopRefused:
            self.held.discard(name)
            member.serving = was  # not stopped: as it was
            self.changed()
            raise

    async def after_start(self, name: str) -> None:
        """The server runs again: once it answers a completion, put it back in the balancer
        and let the others stop (a failed undrain leaves it out: the others wait)."""
        member = self.members[name]
        started = self._clock()
        while True:
            ok, said = await self._probe(member.url, 60.0)
            if ok:
                break
            if not member.running or self._clock() - started >= self.ha.max_wait:
                log.warning("server %s: not put back in the balancer: %s", name, said)
                return
            await asyncio.sleep(self._recheck)
        good = True
        if self.ha.undrain_command:
            argv = substitute(self.ha.undrain_command, name, member.url)
            rc, out = await self._run(argv, self.ha.command_timeout)
            good = rc == 0
            member.decide(
                "undrain",
                Outcome.OK if good else Outcome.FAILED,
                f"{said}; {shlex.join(argv)} " + ("succeeded" if good else f"failed: {out}"),
                {"argv": argv, "exit": rc, "output": out},
            )
        if good:
            member.drained = False
            member.serving = True
            self.held.discard(name)
            self.changed()

    async def _drain(self, member: Member) -> None:
        if not self.ha.drain_command:
            return
        argv = substitute(self.ha.drain_command, member.name, member.url)
        rc, out = await self._run(argv, self.ha.command_timeout)
        params: dict[str, Any] = {"argv": argv, "exit": rc, "output": out}
        if rc != 0:
            why = f"drain {shlex.join(argv)} failed ({'timeout' if rc is None else rc}): {out}"
            if self.ha.drain_required:
                member.decide("drain", Outcome.REFUSED, why, params)
                raise StopRefused(why)
            member.decide("drain", Outcome.FAILED, why + " (ha.drain_required = false)", params)
            return
        member.drained = True
        member.decide("drain", Outcome.OK, f"{shlex.join(argv)} succeeded", params)
        if self.ha.drain_wait > 0:
            await asyncio.sleep(self.ha.drain_wait)

    async def _wait_change(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._recheck):
                await self._changed.wait()


__all__ = ["HAGate", "Member", "StopRefused", "log_owner", "run_argv"]
