"""The daemon: one asyncio loop wiring the parts in the one direction ARCHITECTURE.md draws.

    logs (LogWatch) ──findings──┐
    collectors (runners) ─samples─► rules ─findings─► incidents ─due─► Decider ─► remediation
    server (supervisor/attached) ─state changes──────────────────────────┘   └─► verify

Each part owns its own loop and reacts to what it is handed; this class only builds them,
starts them, says who the doctor is (``DoctorStatus``, once the first log pass is done) and
stops them. The file watcher runs in its own thread and only wakes the log loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ascend_doctor.agent.alerts import AlertListener, Deliverer
from ascend_doctor.agent.attach import AttachedServer, AttachSpec, process_spec, silent_finding
from ascend_doctor.agent.collection import CollectorRunner, build_runners
from ascend_doctor.agent.decider import Decider
from ascend_doctor.agent.fleet import Member
from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.logwatch import LogWatch
from ascend_doctor.agent.profiling import ServerProfiler
from ascend_doctor.agent.remediation import Context, HostTools, Remediator, StepResult, corroborate
from ascend_doctor.agent.remediation.recovery import recover
from ascend_doctor.agent.requests import RequestRunner
from ascend_doctor.agent.server import ServerHandle, build_process
from ascend_doctor.agent.server_version import VersionWatch
from ascend_doctor.agent.supervisor import ExitDecision, Supervisor
from ascend_doctor.agent.telemetry import Telemetry
from ascend_doctor.agent.verify import Verifier
from ascend_doctor.collectors import CollectorContext
from ascend_doctor.collectors.evidence import Keeper
from ascend_doctor.collectors.kernel_log import PidBook
from ascend_doctor.collectors.kernel_sources import kernel_source
from ascend_doctor.collectors.log_files import last_lines
from ascend_doctor.collectors.log_sources import log_sources
from ascend_doctor.collectors.npu_smi import npu_smi_binary
from ascend_doctor.core.config import Config
from ascend_doctor.core.errors import StoreError
from ascend_doctor.core.events import (
    Category,
    Finding,
    IncidentState,
    Outcome,
    ProcessEvent,
    ProcessState,
    Sample,
)
from ascend_doctor.core.launch import LaunchSpec, server_spec
from ascend_doctor.core.procs import is_own, process_start
from ascend_doctor.core.records import DoctorStatus, LaunchRecord, ServerStatus
from ascend_doctor.core.sdnotify import NOTIFY_VARS, Notifier, systemd_tasks
from ascend_doctor.core.store import Store
from ascend_doctor.core.tasks import Lifeline, until_stopped
from ascend_doctor.rules import Engine, RuleSet
from ascend_doctor.rules.crash import CRASH_WINDOW, crash_finding

log = logging.getLogger(__name__)


class Daemon:
    """Everything ``ascend-doctor watch`` runs."""

    def __init__(
        self,
        config: Config,
        state_dir: Path,
        spec: LaunchSpec | None,
        rules: RuleSet,
        *,
        base_env: Mapping[str, str] | None = None,
        attach: AttachSpec | None = None,
        member: Member | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.config = config
        self.attach = attach
        self.state_dir = state_dir
        self.base_spec = spec
        self.member = member  # one of several servers (agent/fleet.py), else None
        # systemd's notify variables are the doctor's alone (sdnotify.py)
        self.notifier = notifier or Notifier.from_environ(os.environ)
        env = os.environ if base_env is None else base_env
        self.base_env = {k: v for k, v in env.items() if k not in NOTIFY_VARS}
        self.store = Store.in_dir(state_dir, lock=True)  # one doctor per state dir
        # alerts: a listener queues every alerting transition in the outbox (a bad sink is a
        # start-up error); the "alerts" task delivers it
        self.alerts = AlertListener(config.alerts, self.store, rules=rules, environ=self.base_env)
        self.store.listeners.append(self.alerts)
        self.engine = Engine(
            rules,
            context_before=config.logs.context_before,
            context_after=config.logs.context_after,
            npu_smi_seen=self.store.latest_samples("npu_smi"),  # old ECC counts are known
        )
        self.incidents = IncidentManager(
            self.store, config.incidents, server=f"server {member.name}" if member else "server"
        )
        self.log_path = _under(state_dir, config.server.log_file)
        # the kernel's voice, about the server's processes only (collectors/kernel_log.py)
        kernel, host_logs = kernel_source(config.logs, self.store)
        self.pid_book = PidBook(roots=lambda: self.server.own_pids | {self.server.pid or 0})
        self._explained_at, self._last_pid = 0.0, 0
        self.logs = LogWatch(
            config.logs,
            self.store,
            log_sources(config.logs, self.log_path if spec else None, self._server_env())
            + host_logs,
            self.engine,
            self._findings,
            on_drained=self._drained,
            kernel=kernel,
            keep=lambda f: self.pid_book.about_server(f) and (member is None or member.owns(f)),
        )
        # telemetry (issue 7): one trace per incident, metrics, the server's request spans
        self.telemetry = Telemetry(
            config,
            self.store,
            log_path=self.log_path if spec is not None else None,
            lines_read=lambda: self.logs.tailer.stats.lines,
            npu_smi=self._npu_smi_binary() if config.collectors.npu_smi.enabled else None,
            server_name=member.name if member else "",
        )
        self.store.listeners.append(self.telemetry)
        self.server = ServerHandle(self._process(), self.effective_spec, self._server_env())
        sampled = frozenset(r.id for r in rules.thresholds)
        self.alerts.may_page = corroborate.pages(lambda: self.server.healthy, sampled)
        # what a live server looked like, kept before any restart or reset of it (issue 20)
        self.evidence = _keeper(self)
        self.profiler = ServerProfiler(
            self.store, config.profiling, lambda: self.server_url if spec else "", self.torch_dir
        )
        self.remediator = Remediator(
            Context(
                config=config.remediation,
                store=self.store,
                server=self.server,
                host=HostTools(
                    npu_smi=config.collectors.npu_smi.path,
                    npu_smi_timeout=config.collectors.npu_smi.timeout,
                    evidence=self.evidence,
                    profile=self.profiler.capture if config.profiling.enabled else None,
                ),
                sleep=asyncio.sleep,
                clock=time.time,
            ),
            self.incidents,
            rules,
        )
        self.decider = Decider(
            self._step, self.server, config.remediation, read_last_words=self.logs.drain
        )
        # requests from the CLI/TUI (acknowledge, capture a profile, run the next step)
        self.requests = RequestRunner(
            self.incidents,
            config.remediation,
            step=self.decider.step_now,
            profile=self.profiler.capture,
            clock=time.time,
        )
        # healed? health for the settle window and a 1-token completion
        self.verifier = Verifier(
            self.incidents, config.remediation, self.remediator.record, lambda: self.server_url
        )
        self.collectors = _runners(self)
        self.versions = VersionWatch(self.store, lambda: self.server_url, config.profiling.enabled)
        if member is not None:
            _join(self, member)
        self._stop = asyncio.Event()
        self._verify_wanted = asyncio.Event()
        self._run_start = 0.0  # wall time the server last became RUNNING
        self._started = time.time()

    # -- wiring --------------------------------------------------------------------------------

    @property
    def supervisor(self) -> Supervisor | AttachedServer | None:
        """What runs or follows the server (None: observing only)."""
        return self.server.process

    @property
    def server_url(self) -> str:
        """Base URL of the server's HTTP API ('' when only observing)."""
        return _server_url(self)

    @property
    def torch_dir(self) -> Path:
        """Where the server writes torch profiles when ``profiling.enabled``."""
        return self.state_dir / "profiles" / "torch"

    @property
    def collector_failures(self) -> dict[str, int]:
        """Failed runs per collector."""
        return {r.spec.name: r.status.failures for r in self.collectors}

    def effective_spec(self) -> LaunchSpec:
        """The base launch spec with every stored override applied (empty when observing;
        what the attached process was started with in attach mode)."""
        return _effective_spec(self)

    def _server_env(self) -> dict[str, str]:
        env = dict(self.base_env)
        if self.base_spec is not None:
            env.update(self.base_spec.env)
        return env

    def _npu_smi_binary(self) -> str:
        return npu_smi_binary(self.config.collectors.npu_smi.path, self._server_env())

    def _process(self) -> Supervisor | AttachedServer | None:
        return build_process(
            self.config,
            attach=self.attach,
            spec=self.effective_spec if self.base_spec is not None else None,
            url=self.server_url,
            log_path=self.log_path,
            on_change=self._on_change,
            on_exit=self._on_exit,
            base_env=self.base_env,
            before_restart=lambda why: self.evidence.before_restart("unhealthy", why),
        )

    # -- run -----------------------------------------------------------------------------------

    async def run(self) -> int:
        """Run until ``shutdown()``; returns the exit status for the CLI."""
        if self.base_spec is not None:
            self.profiler.prepare()
            self.store.set_launch(LaunchRecord(self.base_spec.argv, dict(self.base_spec.env)))
        await self.telemetry.start()
        self.logs.start()
        # the doctor is watching from here on: readers (status, TUI, tests) may rely on it
        self.store.set_doctor(
            DoctorStatus(
                pid=os.getpid(),
                started_at=time.time(),
                mode=self.config.remediation.mode,
                dry_run=self.config.remediation.dry_run,
                attached=self.attach is not None,
                remediation=self.config.remediation,
                proc_start=process_start(os.getpid()) or 0.0,
            )
        )
        tasks = [
            asyncio.create_task(self.logs.run(), name="tail"),
            asyncio.create_task(self.decider.run(), name="decide"),
            asyncio.create_task(
                self.verifier.watch(
                    lambda: self.server.state == ProcessState.RUNNING,
                    lambda: self._run_start,
                    self._verify_wanted,
                    self.decider.due,
                ),
                name="verify",
            ),
            asyncio.create_task(Deliverer(self.alerts).run(), name="alerts"),
            asyncio.create_task(self.requests.run(), name="requests"),
            *(asyncio.create_task(r.run(), name=r.spec.name) for r in self.collectors),
        ]
        lifeline = Lifeline(self._stop, tasks, ("tail", "decide", "verify", "requests"))
        waits = [r.first_run for r in self.collectors if not r.spec.while_running]
        mode = "attached to" if self.attach else "supervising" if self.base_spec else "observing"
        tasks += systemd_tasks(self.notifier, waits, mode, lambda: tasks)
        process = self.server.process
        sup_task = None
        if process is not None:
            if isinstance(process, Supervisor) and await until_stopped(
                recover(self.remediator.ctx, self.incidents, self.remediator.record), self._stop
            ):  # no two servers on one port, no start on a card in reset; SIGTERM still ends it
                await self.versions.before_start(self.base_spec, self._server_env())
                process.start()  # an attached server runs already
            sup_task = asyncio.create_task(process.run(), name="supervisor")
            sup_task.add_done_callback(lambda _: self._stop.set())
        try:
            await self._stop.wait()
            if sup_task is not None and sup_task.done():
                sup_task.result()
        finally:
            self.notifier.notify("STOPPING=1")
            for t in tasks:
                t.cancel()
            _, stuck = await asyncio.wait(tasks, timeout=10)
            for t in stuck:
                log.error("task %s did not stop within 10s; leaving it", t.get_name())
            if process is not None and sup_task is not None:
                await process.shutdown()
                with contextlib.suppress(asyncio.CancelledError):
                    await sup_task
            await self.logs.close()
            await self.telemetry.close()
            self.store.close()
            self.notifier.close()
        return 1 if self.server.state == ProcessState.FATAL or lifeline.ended else 0

    def shutdown(self) -> None:
        """Ask ``run()`` to stop the server and return."""
        self._stop.set()

    # -- what the parts hand on ----------------------------------------------------------------

    def _server_running(self) -> bool:
        return self.server.state == ProcessState.RUNNING

    def _drained(self) -> None:
        self.pid_book.note(self.server.own_pids | {self.server.pid or 0})
        self.telemetry.drained()

    def _findings(self, findings: list[Finding]) -> None:
        if any(f.category != Category.UNRECOGNISED for f in findings):
            self._explained_at = time.time()
        for incident_id in self.incidents.ingest(findings):
            self.decider.due(incident_id)

    def _samples(self, samples: Sequence[Sample]) -> None:
        if self.member is not None:  # another server's cards are its doctor's business
            samples = [s for s in samples if self.member.keeps(s)]
        for s in samples:
            self.store.add_sample(s.collector, s.subject, s.at, s.values)
        self._findings(self.engine.evaluate(samples))

    def _collector_evidence(self, name: str, text: str) -> None:
        """What a failing collector printed (npu-smi's dcmi codes) goes to the rules, once
        per doctor run and code."""
        self.logs.scan_text(name, text, f"{name}:{self._started:.0f}:{zlib.crc32(text.encode()):x}")

    async def _step(self, incident_id: int) -> StepResult:
        """One step of one incident, inside its trace."""
        with self.telemetry.incident_context(incident_id):
            return await self.remediator.remediate(incident_id)

    async def _on_exit(self, event: ProcessEvent) -> ExitDecision:
        return await _exited(self, event)

    def _on_change(self, event: ProcessEvent) -> None:
        if event.pid is not None:
            self.server.own_pids.add(event.pid)
            self._last_pid = event.pid
        if event.state == ProcessState.STARTING:
            self.incidents.note_start(event.at)
        if event.state == ProcessState.RUNNING:
            self._run_start = event.at
            self._verify_wanted.set()
            self.versions.running()
        self.store.add_process_event(event)
        self.notifier.notify(f"STATUS=server {event.state.value}")
        self.store.set_server(
            ServerStatus(
                state=event.state,
                pid=event.pid,
                since=event.at,
                reason=event.reason,
                proc_start=process_start(event.pid) or 0.0,
            )
        )
        if self.member is not None:
            _member_changed(self, self.member, event)
        if event.state == ProcessState.FATAL:
            self._stop.set()  # the server will not run: say so and exit non-zero


def _server_url(d: Daemon) -> str:
    if d.attach is not None:
        return d.config.server.health_url or d.attach.url
    if d.base_spec is None:
        return ""
    return d.config.server.health_url or d.base_spec.health_base_url()


def _effective_spec(d: Daemon) -> LaunchSpec:
    if d.attach is not None:
        return process_spec(d.server.pid if d.server.process else d.attach.pid)
    if d.base_spec is None:
        return LaunchSpec(())
    traces = d.telemetry.receiver_url() if d.config.tracing.capture_server else None
    known = d.store.server_version()
    return server_spec(
        d.base_spec,
        d.store.overrides(),
        d.config.profiling,
        d.torch_dir,
        traces,
        known.vllm if known is not None else None,
    )


def _unexplained_exit(d: Daemon, event: ProcessEvent) -> None:
    """A crash no known finding explains within CRASH_WINDOW is a server_crashed finding."""
    d.logs.drain()  # its last words and the kernel's, before deciding it is unexplained
    if event.crashed and time.time() - d._explained_at > CRASH_WINDOW:
        last = last_lines(d.log_path if d.base_spec else None)
        event = replace(event, pid=event.pid or d._last_pid)
        try:
            d._findings([crash_finding(event, last, str(d.log_path))])
        except StoreError:
            # counted and logged by the store: a full disk must not stop the restart
            log.warning("the crash of pid %s could not be recorded", event.pid)


def _keeper(d: Daemon) -> Keeper:
    """What a live server looked like, kept before any restart or reset of it."""
    return Keeper.from_config(
        d.config.evidence,
        d.state_dir / "diagnostics",
        pid=lambda: d.server.pid,
        devices=lambda: d.server.spec().devices(d.server.base_env),
        log_paths=d.logs.paths,
        npu_smi=d._npu_smi_binary(),
        metrics_url=lambda: d.server_url and d.server_url + "/metrics",
    )


def _runners(d: Daemon) -> list[CollectorRunner]:
    ctx = CollectorContext(
        d.config.collectors,
        d.server_url,
        lambda: d.server.pid,
        d._npu_smi_binary(),
        state_dir=d.state_dir,
        launch_key=lambda: " ".join(d.effective_spec().argv),
        busy=lambda: d.decider.busy,
        attached=d.attach is not None,
        serving=d._server_running,
    )
    return build_runners(
        ctx,
        d.store,
        watched=d.server.process is not None,
        running=d._server_running,
        on_samples=d._samples,
        on_evidence=d._collector_evidence,
        on_run=d.telemetry.collector_run,
    )


async def _exited(d: Daemon, event: ProcessEvent) -> ExitDecision:
    """The server exited: name what no rule explains, decide, keep the evidence first."""
    if d.attach is not None and event.previous == ProcessState.STARTING:
        d._findings([silent_finding(event)])  # it never answered: a server-down incident
    else:
        before = d._explained_at  # the journal's OOM line may still be on its way
        await d.logs.kernel_caught_up(event, lambda: d._explained_at != before)
        _unexplained_exit(d, event)
    decision = await d.decider.on_exit()  # first, with its last words
    if event.crashed and decision != ExitDecision.STOP:  # kept before it starts again
        await d.evidence.before_restart("crash", event.reason)
    return decision


ACTIVE = (IncidentState.OPEN, IncidentState.MITIGATING)


def _join(d: Daemon, member: Member) -> None:
    """One of several servers: its stops pass the gate, its decisions go on the incidents
    being fixed, a stop the gate refuses escalates them."""
    member.handle = d.server
    if isinstance(d.server.process, Supervisor):
        d.server.process.label = f"server {member.name}"
    member.ours = lambda pid: pid in d.pid_book.pids or is_own(pid, d.server.own_pids)

    def decide(name: str, outcome: Outcome, reason: str, params: dict[str, Any]) -> None:
        for incident_id in d.decider.acting:
            d.remediator.record(incident_id, name, outcome, f"[{member.name}] {reason}", params)
        if not d.decider.acting:
            log.warning("server %s: %s %s: %s", member.name, name, outcome.value, reason)

    def refused(why: str) -> None:
        for incident_id in d.decider.acting:
            if d.store.incident(incident_id).state in ACTIVE:
                d.incidents.escalate(incident_id, f"not restarted: {why}")

    member.decide = decide
    d.decider.refused = refused
    if member.gate is not None:
        gate = member.gate
        d.server.before_stop = lambda reason: gate.before_stop(member.name, reason)


def _member_changed(d: Daemon, member: Member, event: ProcessEvent) -> None:
    if member.gate is not None:
        member.gate.changed(member.name, event.state == ProcessState.RUNNING)
        if event.state == ProcessState.RUNNING:
            member.gate.started(member.name)


def _under(state_dir: Path, name: str) -> Path:
    p = Path(name)
    return p if p.is_absolute() else state_dir / p


__all__ = ["Daemon"]
