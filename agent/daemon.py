"""The daemon: one asyncio loop wiring collectors, rules, incidents, remediation and the
supervisor, in the one direction ARCHITECTURE.md draws. The file watcher runs in its
own thread and only wakes the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ascend_doctor.agent.alerts import AlertEngine, Deliverer
from ascend_doctor.agent.attach import AttachedServer, AttachSpec, process_spec
from ascend_doctor.agent.incidents import IncidentManager
from ascend_doctor.agent.launch import LaunchSpec
from ascend_doctor.agent.remediation import Context, Remediator
from ascend_doctor.agent.remediation.remediator import StepResult
from ascend_doctor.agent.requests import RequestRunner
from ascend_doctor.agent.supervisor import ExitDecision, Supervisor, http_probe
from ascend_doctor.agent.telemetry import Telemetry
from ascend_doctor.agent.verify import Verifier
from ascend_doctor.collectors.logs import (
    Checkpoint,
    Checkpoints,
    Source,
    Tailer,
    Waker,
    source_kind,
)
from ascend_doctor.collectors.npu_smi import NpuSmiCollector
from ascend_doctor.collectors.process import ProcessCollector
from ascend_doctor.collectors.vllm import VllmCollector
from ascend_doctor.core.config import Config
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.events import (
    Finding,
    LogChunk,
    ProcessEvent,
    ProcessState,
    Sample,
)
from ascend_doctor.core.store import Store
from ascend_doctor.rules import Engine, RuleSet

log = logging.getLogger(__name__)

TAILER_STARTED = "tailer.first_started_at"
DECIDE_DELAY = 1.0  # seconds a finding waits for the server's exit to be seen with it
EXIT_GRACE = 15.0  # seconds a dying server (engine-death line seen) gets to exit on its own


class Collector(Protocol):
    """One job: ``collect() -> samples``; the runner owns schedule, timing and isolation."""

    name: str

    def collect(self) -> Awaitable[Sequence[Sample]]:
        """One run."""
        ...


class _StoreCheckpoints(Checkpoints):
    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, identity: str) -> Checkpoint | None:
        row = self.store.offset(identity)
        return None if row is None else Checkpoint(*row)

    def by_head(self, head: str) -> Checkpoint | None:
        row = self.store.offset_by_head(head)
        return None if row is None else Checkpoint(*row)

    def put(self, items: list[tuple[str, str, Checkpoint]]) -> None:
        self.store.set_offsets([(i, p, c.offset, c.head, c.file_id) for i, p, c in items])


def cann_log_root(env: Mapping[str, str]) -> Path:
    """Where CANN writes plogs for a process with this environment (FORMATS.md section 1)."""
    for var in ("ASCEND_PROCESS_LOG_PATH", "ASCEND_WORK_PATH"):
        if env.get(var):
            root = Path(env[var])
            return root if var == "ASCEND_PROCESS_LOG_PATH" else root / "log"
    return Path(env.get("HOME", str(Path.home()))) / "ascend" / "log"


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
    ) -> None:
        self.config = config
        self.attach = attach
        self.state_dir = state_dir
        self.base_spec = spec
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.store = Store.in_dir(state_dir)
        # alerts: a listener queues every alerting transition in the outbox (a bad sink is a
        # start-up error); the "alerts" task delivers it
        self.alerts = AlertEngine(config.alerts, self.store, rules=rules, environ=self.base_env)
        self.store.listeners.append(self.alerts)
        self.engine = Engine(
            rules,
            context_before=config.logs.context_before,
            context_after=config.logs.context_after,
        )
        self.incidents = IncidentManager(self.store, config.incidents)
        self.log_path = _under(state_dir, config.server.log_file)
        self.tailer = Tailer(
            self._sources(),
            _StoreCheckpoints(self.store),
            read_from=config.logs.read_from,
            lookback_bytes=config.logs.lookback_bytes,
            # read_from=end is for the doctor's very first start only; after that, a file
            # nobody has seen was written while the doctor was away and is read whole
            first_start=self.store.meta(TAILER_STARTED) is None,
            max_line_bytes=config.logs.max_line_bytes,
        )
        # telemetry (issue 7): one trace per incident, metrics, the server's request spans
        self.telemetry = Telemetry(
            config,
            self.store,
            log_path=self.log_path if spec is not None else None,
            lines_read=lambda: self.tailer.stats.lines,
            npu_smi=self._npu_smi_binary() if config.collectors.npu_smi.enabled else None,
        )
        self.store.listeners.append(self.telemetry)
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._pending: dict[int, float] = {}
        self._stopping = False
        self._own_pids: set[int] = set()
        self._run_start = 0.0  # wall time the server last became RUNNING
        self.collector_failures: dict[str, int] = {"npu_smi": 0}
        self._started_at = time.time()
        self.supervisor: Supervisor | AttachedServer | None = None
        if attach is not None:
            self.supervisor = AttachedServer(
                attach,
                config.server,
                probe=http_probe(self.server_url),
                on_change=self._on_change,
                on_exit=self._on_exit,
                command_timeout=config.remediation.command_timeout,
            )
        elif spec is not None:
            self.supervisor = Supervisor(
                self.effective_spec,
                config.server,
                self.log_path,
                probe=http_probe(self.server_url),
                on_change=self._on_change,
                on_exit=self._on_exit,
                base_env=self.base_env,
            )
        self.remediator = Remediator(
            Context(
                config=config.remediation,
                store=self.store,
                spec=self.effective_spec,
                base_env=self._server_env(),
                npu_smi=config.collectors.npu_smi.path,
                npu_smi_timeout=config.collectors.npu_smi.timeout,
                server_running=lambda: (
                    self.supervisor is not None and self.supervisor.pid is not None
                ),
                stop_server=self._stop_server,
                sleep=asyncio.sleep,
                clock=time.time,
                own_pids=self._own_pids,
                supervised=spec is not None,
                attached=attach is not None,
                can_restart=attach is not None and bool(attach.restart_command),
                profile_capture=self._capture_profile if config.profiling.enabled else None,
                diagnostics_dir=state_dir / "diagnostics",
                log_paths=lambda: [t for t in self.tailer.paths()],
            ),
            rules,
        )
        # requests from the CLI/TUI (acknowledge, capture a profile, run the next step)
        self.requests = RequestRunner(
            self.store,
            config.remediation,
            step=self._requested_step,
            profile=self._capture_profile,
            clock=time.time,
        )
        # healed? health for the settle window and a 1-token completion
        self.verifier = Verifier(
            self.store, config.remediation, self.remediator.record, lambda: self.server_url
        )

    # -- wiring --------------------------------------------------------------------------------

    @property
    def server_url(self) -> str:
        """Base URL of the server's HTTP API ('' when only observing)."""
        if self.attach is not None:
            return self.config.server.health_url or self.attach.url
        if self.base_spec is None:
            return ""
        return self.config.server.health_url or self.base_spec.health_base_url()

    def effective_spec(self) -> LaunchSpec:
        """The base launch spec with every stored override applied (empty when observing;
        what the attached process was started with in attach mode)."""
        if self.attach is not None:
            return process_spec(self.supervisor.pid if self.supervisor else self.attach.pid)
        if self.base_spec is None:
            return LaunchSpec(())
        spec = self.base_spec.apply(self.store.overrides())
        prof = self.config.profiling
        if prof.enabled and prof.legacy_env:
            spec = spec.with_env("VLLM_TORCH_PROFILER_DIR", str(self.torch_profile_dir))
        elif prof.enabled and spec.flag("--profiler-config") is None:
            cfg = {"profiler": "torch", "torch_profiler_dir": str(self.torch_profile_dir)}
            spec = spec.with_flag("--profiler-config", json.dumps(cfg))
        if prof.msprof:
            spec = spec.with_env("PROFILING_MODE", "dynamic")
        traces_url = self.telemetry.receiver_url() if self.config.tracing.capture_server else None
        if traces_url is not None and spec.flag("--otlp-traces-endpoint") is None:
            # vLLM's exporter defaults to grpc; the receiver speaks OTLP/HTTP
            spec = spec.with_flag("--otlp-traces-endpoint", traces_url)
            spec = spec.with_env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
        return spec

    @property
    def torch_profile_dir(self) -> Path:
        """Where the server writes torch profiles when ``profiling.enabled``."""
        return self.state_dir / "profiles" / "torch"

    def _server_env(self) -> dict[str, str]:
        env = dict(self.base_env)
        if self.base_spec is not None:
            env.update(self.base_spec.env)
        return env

    def _sources(self) -> list[Source]:
        sources = [Source(str(self.log_path), "server")] if self.base_spec else []
        if self.config.logs.cann:
            root = cann_log_root(self._server_env())
            for level in ("debug", "run"):
                sources.append(Source(str(root / level / "plog" / "*.log"), "plog"))
                sources.append(Source(str(root / level / "device-*" / "*.log"), "device"))
        for pattern in self.config.logs.paths:
            sources.append(Source(pattern, source_kind(pattern)))
        return sources

    # -- run -----------------------------------------------------------------------------------

    async def run(self) -> int:
        """Run until ``shutdown()``; returns the exit status for the CLI."""
        loop = asyncio.get_running_loop()

        def wake() -> None:
            loop.call_soon_threadsafe(self._wake.set)

        waker = Waker(wake)
        if self.config.logs.inotify:
            waker.start(self.tailer.watch_dirs())
        if self.base_spec is not None and self.config.profiling.enabled:
            self.torch_profile_dir.mkdir(parents=True, exist_ok=True)
            self.store.set_meta(
                "profiling",
                {
                    "torch_dir": str(self.torch_profile_dir),
                    "url": self.server_url,
                    "msprof": self.config.profiling.msprof,
                },
            )
        if self.base_spec is not None:
            self.store.set_meta(
                "launch", {"argv": list(self.base_spec.argv), "env": dict(self.base_spec.env)}
            )
        await self.telemetry.start()
        # Take start positions before the server writes anything, and read what a restarted
        # doctor missed while it was away (never drop what this first pass reads).
        self._drain()
        if self.store.meta(TAILER_STARTED) is None:
            self.store.set_meta(TAILER_STARTED, time.time())
        # the doctor is watching from here on: readers (status, TUI, tests) may rely on it
        self.store.set_meta(
            "doctor",
            {
                "pid": os.getpid(),
                "started_at": time.time(),
                "mode": self.config.remediation.mode,
                "dry_run": self.config.remediation.dry_run,
                "remediation": dataclasses.asdict(self.config.remediation),
                "attached": self.attach is not None,
            },
        )
        tasks = [
            asyncio.create_task(self._tail_loop(), name="tail"),
            asyncio.create_task(self._decide_loop(), name="decide"),
            asyncio.create_task(self._verify_loop(), name="verify"),
            asyncio.create_task(Deliverer(self.alerts).run(), name="alerts"),
            asyncio.create_task(self.requests.run(), name="requests"),
        ]
        if self.config.collectors.npu_smi.enabled:
            tasks.append(asyncio.create_task(self._npu_smi_loop(), name="npu_smi"))
        if self.config.collectors.vllm.enabled and self.supervisor is not None:
            tasks.append(asyncio.create_task(self._vllm_loop(), name="vllm"))
        if self.config.collectors.process.enabled and self.supervisor is not None:
            sup = self.supervisor
            tasks.append(
                asyncio.create_task(
                    self._run_collector(
                        ProcessCollector(lambda: sup.pid),
                        self.config.collectors.process.interval,
                        lambda: True,
                    ),
                    name="process",
                )
            )
        sup_task = None
        if self.supervisor is not None:
            if isinstance(self.supervisor, Supervisor):
                self.supervisor.start()  # an attached server runs already
            sup_task = asyncio.create_task(self.supervisor.run(), name="supervisor")
        try:
            while not self._stopping:
                if sup_task is not None and sup_task.done():
                    sup_task.result()
                    break
                if self.supervisor is not None and self.supervisor.state == ProcessState.FATAL:
                    break  # the server will not run: say so and exit non-zero
                await asyncio.sleep(0.2)
        finally:
            for t in tasks:
                t.cancel()
            _, stuck = await asyncio.wait(tasks, timeout=10)
            for t in stuck:
                log.error("task %s did not stop within 10s; leaving it", t.get_name())
            if self.supervisor is not None and sup_task is not None:
                await self.supervisor.shutdown()
                with contextlib.suppress(asyncio.CancelledError):
                    await sup_task
            await asyncio.to_thread(waker.stop)
            self._drain()
            self.tailer.close()
            await self.telemetry.close()
            self.store.close()
        if self.supervisor is not None and self.supervisor.state == ProcessState.FATAL:
            return 1
        return 0

    def shutdown(self) -> None:
        """Ask ``run()`` to stop the server and return."""
        self._stopping = True

    # -- logs and rules ------------------------------------------------------------------------

    def _drain(self) -> None:
        """Read every source to its end now and act on what it says."""
        while True:
            chunks = self.tailer.poll()
            if not chunks:
                break
            findings: list[Finding] = []
            for chunk in chunks:
                findings.extend(self.engine.scan(chunk))
            self._ingest(findings)
            self.tailer.commit()
        self.telemetry.drained()

    def _ingest(self, findings: list[Finding]) -> None:
        if not findings:
            return
        for incident_id in self.incidents.ingest(findings):
            self._pending.setdefault(incident_id, time.monotonic())

    async def _tail_loop(self) -> None:
        while not self._stopping:
            try:
                self._drain()
            except Exception:  # a failing part is logged and isolated; the daemon goes on
                log.exception("tailing failed")
            self._wake.clear()
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancellation
            # that stops this loop, and then the daemon never finishes shutting down.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.logs.poll_interval):
                    await self._wake.wait()

    def _npu_smi_binary(self) -> str:
        path = self.config.collectors.npu_smi.path
        return shutil.which(path, path=self._server_env().get("PATH")) or path

    async def _npu_smi_loop(self) -> None:
        cfg = self.config.collectors.npu_smi
        collector = NpuSmiCollector(self._npu_smi_binary(), timeout=cfg.timeout, usages=cfg.usages)
        await self._run_collector(collector, cfg.interval, lambda: True)

    async def _vllm_loop(self) -> None:
        cfg = self.config.collectors.vllm
        collector = VllmCollector(self.server_url, timeout=cfg.timeout)

        def running() -> bool:  # a starting or stopped server has nothing to say yet
            return self.supervisor is not None and self.supervisor.state == ProcessState.RUNNING

        await self._run_collector(collector, cfg.interval, running, first_wait=True)

    async def _run_collector(
        self,
        collector: Collector,
        interval: float,
        active: Callable[[], bool],
        *,
        first_wait: bool = False,
    ) -> None:
        """Run one collector on its schedule: samples stored and evaluated, each run's duration
        and outcome recorded, a failure logged and counted; it never stops another collector."""
        name = collector.name
        status: dict[str, Any] = {"runs": 0, "failures": 0}
        if first_wait:
            await asyncio.sleep(interval)
        while not self._stopping:
            if active():
                t0 = time.monotonic()
                status["runs"] += 1
                try:
                    samples = await collector.collect()
                    for s in samples:
                        self.store.add_sample(s.collector, s.subject, s.at, s.values)
                    self._ingest(self.engine.evaluate(samples))
                    status.update(ok=True, last_ok_at=time.time(), last_error="")
                except CollectorError as exc:
                    status.update(ok=False, failures=status["failures"] + 1, last_error=str(exc))
                    log.warning("collector %s: %s", name, exc)
                    self._collector_evidence(collector)
                except Exception as exc:
                    log.exception("collector %s failed", name)
                    why = f"{type(exc).__name__}: {exc}"
                    status.update(ok=False, failures=status["failures"] + 1, last_error=why)
                status["last_duration_s"] = round(time.monotonic() - t0, 3)
                self.telemetry.collector_run(name, status["last_duration_s"], bool(status["ok"]))
                self.collector_failures[name] = status["failures"]
                self.store.set_meta(f"collector.{name}", {**status, "at": time.time()})
                if "not found" in status.get("last_error", ""):
                    log.warning("collector %s disabled: %s", name, status["last_error"])
                    return
            await asyncio.sleep(interval)

    def _collector_evidence(self, collector: Collector) -> None:
        """What a failing npu-smi said: raw text kept, dcmi codes to the rules (once each)."""
        if not isinstance(collector, NpuSmiCollector):
            return
        if collector.last_raw:
            self.store.set_meta("collector.npu_smi.last_raw", collector.last_raw)
        if collector.last_dcmi is not None:
            code, text = collector.last_dcmi
            chunk = LogChunk(
                "npu-smi info",
                "host",
                0,
                (text + "\n").encode(),
                file_id=f"npu-smi:{self._started_at:.0f}:dcmi{code}",
            )
            self._ingest(self.engine.scan(chunk))

    # -- decisions -----------------------------------------------------------------------------

    async def _decide_loop(self) -> None:
        """Act on findings that arrived while the server is alive (after a short grace)."""
        while not self._stopping:
            await asyncio.sleep(0.2)
            now = time.monotonic()
            sup = self.supervisor
            due = [i for i, t in self._pending.items() if now - t >= DECIDE_DELAY]
            if sup is not None and sup.dying:
                # its exit is coming and will be decided on with all its last words
                due = [i for i in due if now - self._pending[i] >= EXIT_GRACE]
            if not due:
                continue
            async with self._lock:
                restart, escalated = await self._remediate(due)
            if sup is None:
                continue
            if restart:
                await sup.restart("restarting the server to apply the remediation")
            elif (
                escalated
                and self.config.remediation.on_escalation == "keep"
                and sup.state == ProcessState.STOPPED
            ):
                sup.start()  # a step stopped it before the failure went to a human

    async def _remediate(self, ids: list[int]) -> tuple[bool, bool]:
        """Run the next step of each pending incident; (restart the server?, any escalated?).
        The caller holds the lock."""
        restart = escalated = False
        for incident_id in ids:
            if self._pending.pop(incident_id, None) is None:
                continue
            try:
                result = await self._step(incident_id)
            except Exception:
                log.exception("remediation of incident %d failed", incident_id)
                continue
            restart = restart or result.restart
            escalated = escalated or result.escalated
        return restart, escalated

    async def _step(self, incident_id: int) -> StepResult:
        """One step of one incident, inside its trace; a step that meets a cooldown is decided
        again once it is over. The caller holds the lock."""
        try:
            with self.telemetry.incident_context(incident_id):
                result = await self.remediator.remediate(incident_id)
        finally:
            # evidence that arrived while this step ran (a device reset takes seconds)
            # belongs to the failure being fixed, not to a failure of the fix
            self._pending.pop(incident_id, None)
        if result.retry_at is not None:
            wait = max(0.0, result.retry_at - time.time())
            self._pending[incident_id] = time.monotonic() + wait - DECIDE_DELAY
        return result

    async def _requested_step(self, incident_id: int) -> StepResult:
        """The next step of an incident because an operator asked (the policy still decides)."""
        async with self._lock:
            result = await self._step(incident_id)
        if result.restart and self.supervisor is not None:
            await self.supervisor.restart("restarting the server to apply the remediation")
        return result

    async def _on_exit(self, event: ProcessEvent) -> ExitDecision:
        self._drain()  # the server's last words are in its log now: read them first
        async with self._lock:
            restart, escalated = await self._remediate(list(self._pending))
        if restart:
            return ExitDecision.RESTART
        if escalated and self.config.remediation.on_escalation == "stop":
            log.error("leaving the server stopped: its failure went to a human")
            return ExitDecision.STOP
        return ExitDecision.BACKOFF

    async def _capture_profile(self) -> dict[str, Any]:
        """Record a torch profile of the running server (the capture_profile action)."""
        from ascend_doctor.agent.profiling import torch_capture

        prof = self.config.profiling
        if self.base_spec is None or not prof.enabled:
            raise RuntimeError("profiling.enabled is off: the server has no profiler")
        art = await torch_capture(
            self.server_url, self.torch_profile_dir, prof.capture_seconds, timeout=60
        )
        artifacts = list(self.store.meta("artifacts") or [])
        artifacts.append(dataclasses.asdict(art))
        self.store.set_meta("artifacts", artifacts)
        return dataclasses.asdict(art)

    async def _stop_server(self, reason: str) -> None:
        if self.supervisor is not None:
            await self.supervisor.stop(reason)

    def _on_change(self, event: ProcessEvent) -> None:
        if event.pid is not None:
            self._own_pids.add(event.pid)
        if event.state == ProcessState.STARTING:
            self.incidents.note_start(event.at)
        if event.state == ProcessState.RUNNING:
            self._run_start = event.at
        self.store.add_process_event(
            event.state.value,
            event.previous.value,
            event.at,
            event.pid,
            event.exit_code,
            event.crashed,
            event.reason,
        )
        self.store.set_meta(
            "server",
            {
                "state": event.state.value,
                "pid": event.pid,
                "since": event.at,
                "reason": event.reason,
            },
        )

    async def _verify_loop(self) -> None:
        """Resolve mitigating incidents once the server stayed healthy for the settle window."""
        settle = self.config.remediation.settle_seconds
        while not self._stopping:
            await asyncio.sleep(0.25)
            sup = self.supervisor
            if sup is None or sup.state != ProcessState.RUNNING:
                continue
            if time.time() - self._run_start < settle:
                continue
            for incident_id in await self.verifier.check(self._run_start, lambda: self._run_start):
                self._pending.setdefault(incident_id, time.monotonic())


def _under(state_dir: Path, name: str) -> Path:
    p = Path(name)
    return p if p.is_absolute() else state_dir / p


__all__ = ["Daemon", "cann_log_root"]
