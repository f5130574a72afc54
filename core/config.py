"""The doctor's configuration: one TOML file, every key with a default.

Validated at start-up: an error names the file, the line when it can be found,
the key, the value and what was expected, and stops start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ascend_doctor.core.config_evidence import EvidenceConfig
from ascend_doctor.core.ha import HAConfig, ServerEntry


@dataclass(frozen=True)
class ServerConfig:
    """How the supervised ``vllm serve`` is started, probed and stopped."""

    health_url: str = ""
    """Base URL for /health; empty derives it from the command's --host/--port."""
    start_timeout: float = 900.0
    """Seconds a start may take until /health answers 200 (model loading is slow)."""
    health_interval: float = 0.5
    """Seconds between /health probes while starting."""
    probe_interval: float = 5.0
    """Seconds between /health probes while running."""
    probe_failures: int = 3
    """Consecutive failed probes of a running server before it counts as down."""
    stop_grace: float = 30.0
    """Seconds between SIGTERM and SIGKILL when stopping the server."""
    backoff_initial: float = 2.0
    """First backoff delay after a crash, in seconds."""
    backoff_max: float = 60.0
    """Cap of the exponential backoff, in seconds."""
    start_retries: int = 5
    """Consecutive failed starts before the supervisor gives up (FATAL)."""
    crash_markers: tuple[str, ...] = (
        "EngineDeadError",
        "EngineCore encountered a fatal error",
        "died unexpectedly",
        "Engine core initialization failed",
    )
    """Output substrings that make an exit with status 0 count as a crash."""
    log_file: str = "server.log"
    """The server's teed output, relative to the state dir unless absolute."""
    echo: bool = True
    """Also copy the server's output to the doctor's terminal."""


@dataclass(frozen=True)
class LogsConfig:
    """What the tailer follows."""

    paths: tuple[str, ...] = ()
    """Extra files or globs to follow (host logs, slog trees)."""
    follow_roots: tuple[str, ...] = ("/var/log/pods",)
    """Where a symlinked log may point besides the directories of the sources: a symlink to
    anything else (``/etc/shadow``), and anything not a regular file (a FIFO), is not read."""
    cann: bool = True
    """Follow the CANN plog/device logs under the server's ASCEND_PROCESS_LOG_PATH."""
    poll_interval: float = 0.25
    """Seconds between stat passes (inotify, when present, wakes the tailer sooner: once per
    burst of writes, for one pass over the files it follows; the globs are looked at again
    when inotify sees a file appear, move or go, and at least this often)."""
    inotify: bool = True
    """Use inotify to wake the tailer; off for filesystems without it (NFS): stat pass only."""
    read_from: str = "end"
    """Where files seen at first start are read from: ``end`` or ``beginning``."""
    lookback_bytes: int = 0
    """With ``read_from = "end"``, also read this many bytes before the end (whole lines)."""
    max_line_bytes: int = 262144
    """Lines longer than this are cut."""
    context_before: int = 2
    """Lines of context kept before a matched line."""
    context_after: int = 3
    """Lines of context kept after a matched line."""
    kernel: bool = True
    """Read the kernel's messages (OOM killer, segfaults, the NPU driver): ``kernel_path``
    from a cursor kept in the store, or /var/log/kern.log and /var/log/messages when it
    cannot be read. Lines about a process that is not the server's are dropped."""
    kernel_path: str = "/dev/kmsg"
    """The kernel's record stream."""


@dataclass(frozen=True)
class NpuSmiConfig:
    """The npu-smi collector."""

    enabled: bool = True
    """Run the collector."""
    path: str = "npu-smi"
    """The npu-smi binary (looked up on the server's PATH when not absolute)."""
    interval: float = 5.0
    """Seconds between runs."""
    timeout: float = 10.0
    """Seconds before a hung npu-smi is killed."""
    usages: bool = False
    """Also run ``npu-smi info -t usages -i N`` per device (vector core, bandwidth rates)."""
    ecc_interval: float = 60.0
    """Seconds between reads of each card's ECC counters (``npu-smi info -t ecc``); 0: never."""
    trend_window: float = 3600.0
    """Seconds of HBM samples the memory-creep trend fits (``hbm_oom_eta_s``); an estimate
    comes once the samples span half of it."""


@dataclass(frozen=True)
class VllmConfig:
    """The vllm collector: /health, /metrics and /v1/models of the supervised server."""

    enabled: bool = True
    """Run the collector while the server is RUNNING."""
    interval: float = 5.0
    """Seconds between runs."""
    timeout: float = 5.0
    """Seconds before a request is abandoned."""
    baseline_seconds: float = 3600.0
    """Healthy time with requests flowing over which the TTFT and inter-token latency p99
    baselines are learned (the first hour); the ``*_p99_ratio`` fields compare to them."""


@dataclass(frozen=True)
class ProcessConfig:
    """The process collector: psutil over the server's process tree, and host memory/load."""

    enabled: bool = True
    """Run the collector while a server is supervised."""
    interval: float = 10.0
    """Seconds between runs."""
    trend_window: float = 3600.0
    """Seconds of RSS samples the memory-creep trend fits (``rss_oom_eta_s``)."""


@dataclass(frozen=True)
class CanaryConfig:
    """The canary: a small deterministic completion the server must answer right."""

    enabled: bool = True
    """Send canaries while the server is RUNNING (never while it starts or is remediated)."""
    interval: float = 60.0
    """Seconds between canaries."""
    timeout: float = 10.0
    """Seconds a canary waits for its answer before it counts as unanswered."""
    prompt: str = "The capital of France is"
    """The prompt; the first good answer of each launch is its reference."""
    max_tokens: int = 8
    """Tokens asked for (greedy, seeded)."""
    seed: int = 0
    """The request's seed."""
    attach: bool = False
    """Also send canaries to an attached server (off: attach mode sends it nothing)."""


@dataclass(frozen=True)
class CollectorsConfig:
    """Collectors by registered name."""

    npu_smi: NpuSmiConfig = field(default_factory=NpuSmiConfig)
    """``[collectors.npu_smi]``."""
    vllm: VllmConfig = field(default_factory=VllmConfig)
    """``[collectors.vllm]``."""
    process: ProcessConfig = field(default_factory=ProcessConfig)
    """``[collectors.process]``."""
    canary: CanaryConfig = field(default_factory=CanaryConfig)
    """``[collectors.canary]``."""


@dataclass(frozen=True)
class RemediationConfig:
    """What remediation may do, and its bounds."""

    mode: str = "auto"
    """``auto`` acts, ``suggest`` records what it would do, ``off`` does nothing."""
    dry_run: bool = False
    """Log what would be done without doing it."""
    budget_per_hour: int = 6
    """Remediation steps allowed per hour across the host (reserved before acting)."""
    breaker_count: int = 5
    """Steps for one category within ``breaker_hours`` before it goes to a human."""
    breaker_hours: float = 24.0
    """Window of the circuit breaker, in hours."""
    max_attempts: int = 3
    """Remediation attempts per incident before it is escalated."""
    min_max_model_len: int = 2048
    """Never lower --max-model-len below this."""
    min_gpu_memory_utilization: float = 0.5
    """Never lower --gpu-memory-utilization below this."""
    gpu_memory_utilization_step: float = 0.05
    """How much one step lowers --gpu-memory-utilization."""
    allow_device_reset: bool = False
    """Allow ``npu-smi set -t reset`` on this server's devices (needs root on real hosts)."""
    reset_scope: str = "board"
    """What one reset takes down: ``board`` (HCCS on: every NPU of an Atlas 800T A2), or
    ``chip`` (HCCS off): only the failed NPU; npu-smi's board-wide question is then answered
    no, and the reset aborts rather than touch the other servers' cards."""
    reset_settle: float = 20.0
    """Seconds to wait after a device reset before checking its health."""
    command_timeout: float = 120.0
    """Seconds before an npu-smi action is abandoned with outcome ``unknown``."""
    settle_seconds: float = 30.0
    """A server healthy this long after a remediation resolves the incident."""
    completion_probe: bool = True
    """Also ask the healed server for a 1-token completion before resolving an incident."""
    probe_timeout: float = 60.0
    """Seconds the completion probe may take (the first request after a start is slow)."""
    action_cooldown: float = 120.0
    """Seconds before the same action may run again on this host (``restart`` is paced by
    the supervisor's backoff instead); a step that meets a cooldown waits for it."""
    reset_cooldown: float = 600.0
    """Seconds between two device resets on this host."""
    corroboration_window: float = 300.0
    """Seconds an incident resting on log text alone, while the server is running and
    healthy, waits for an independent signal (exit, failed /health, npu-smi, metrics) before
    it is closed with nothing done; text alone never disrupts a healthy server."""
    quiet_retry: float = 60.0
    """Seconds a planned restart (memory creep) waits before it looks for a quiet window
    again."""
    quiet_window: float = 3600.0
    """Seconds of load history a planned restart compares with: the lowest load of it is a
    quiet moment too."""
    on_escalation: str = "stop"
    """What happens to a server whose failure went to a human: ``stop`` leaves it stopped
    (no more restarts until an operator acts), ``keep`` goes on restarting it with backoff."""


@dataclass(frozen=True)
class ProfilingConfig:
    """Profiles on demand (``ascend-doctor profile``, the ``capture_profile`` action)."""

    enabled: bool = False
    """Start the server with vLLM's torch profiler writing under the state dir, switched on as
    its release takes it (``--profiler-config`` from 0.13, ``VLLM_TORCH_PROFILER_DIR`` before;
    the release is read with ``vllm --version`` before the first start)."""
    legacy_env: bool = False
    """Always use ``VLLM_TORCH_PROFILER_DIR`` (ignored by vLLM 0.18 and later)."""
    msprof: bool = False
    """Start the server with ``PROFILING_MODE=dynamic`` so msprof can attach."""
    capture_seconds: float = 10.0
    """How long the ``capture_profile`` remediation action records."""
    advisor: bool = True
    """Also run msprof-analyze's advisor on each capture the doctor takes, where it is
    installed (it can take minutes on a large capture)."""


@dataclass(frozen=True)
class RulesConfig:
    """Where rules come from besides the shipped packs."""

    dirs: tuple[str, ...] = ()
    """Site rules directories: add rules, override fields by id, disable by id."""


@dataclass(frozen=True)
class IncidentsConfig:
    """How findings group into incidents."""

    window: float = 120.0
    """Findings of a category and subject within this many seconds join one incident."""


@dataclass(frozen=True)
class AlertSinkConfig:
    """One ``[[alerts.sinks]]`` table: where alerts go. Secrets are never written here: a
    key ending in ``_env`` names an environment variable, one ending in ``_file`` a file."""

    name: str = ""
    """The sink's name, used by routes, ``alerts test --sink`` and ``status``."""
    type: str = ""
    """``pagerduty``, ``slack``, ``alertmanager``, ``webhook`` or ``command``."""
    role: str = ""
    """``page`` or ``notify`` for the default routes; empty: pagerduty pages, others notify."""
    url: str = ""
    """Endpoint that is not a secret (Alertmanager base URL, PagerDuty events URL)."""
    url_env: str = ""
    """Environment variable holding a secret URL (Slack or webhook)."""
    url_file: str = ""
    """File holding a secret URL (Slack or webhook)."""
    routing_key_env: str = ""
    """Environment variable holding the PagerDuty routing key."""
    routing_key_file: str = ""
    """File holding the PagerDuty routing key."""
    secret_env: str = ""
    """Environment variable holding the webhook's HMAC-SHA256 secret."""
    secret_file: str = ""
    """File holding the webhook's HMAC-SHA256 secret."""
    headers: tuple[str, ...] = ()
    """Extra webhook headers, ``"Name: value"``; a value ``env:VAR`` is read from VAR."""
    argv: tuple[str, ...] = ()
    """The command sink's argv (no shell); the alert JSON arrives on its stdin."""
    timeout: float = 10.0
    """Seconds before one delivery attempt is abandoned."""
    rate: float = 0.0
    """Messages per second this sink may receive (token bucket); 0: 1 for Slack, else 10."""
    burst: int = 0
    """Token bucket size; 0: 1 for Slack, else 20."""
    resend_interval: float = 60.0
    """Alertmanager: seconds between re-sends of firing alerts (its client contract)."""


@dataclass(frozen=True)
class AlertRouteConfig:
    """One ``[[alerts.routes]]`` table: which alerts go to which sinks."""

    sinks: tuple[str, ...] = ()
    """Sink names this route sends to."""
    categories: tuple[str, ...] = ()
    """Incident categories it matches; empty matches every category."""
    min_severity: str = "info"
    """The least severity it matches."""
    events: tuple[str, ...] = ("opened", "escalated", "resolved", "remediation_failed")
    """Transitions it triggers on: ``opened``, ``escalated``, ``remediation_failed`` (a resolve
    or an acknowledgement always follows its trigger to the sinks that got it)."""


@dataclass(frozen=True)
class AlertsConfig:
    """Alerts to on-call: sinks, routes and noise control."""

    host: str = ""
    """The host name alerts carry; empty: this machine's name."""
    sinks: tuple[AlertSinkConfig, ...] = ()
    """``[[alerts.sinks]]`` tables."""
    routes: tuple[AlertRouteConfig, ...] = ()
    """``[[alerts.routes]]`` tables; none: page sinks get escalated and critical incidents,
    notify sinks every transition."""
    group_wait: float = 5.0
    """Seconds an alert waits before its first delivery; an incident that opens and
    resolves within it sends nothing, transitions within it send only the latest."""
    repeat_interval: float = 14400.0
    """Seconds after which an unacknowledged firing alert is sent again; 0 never."""
    poll_interval: float = 0.5
    """Seconds between passes of the delivery loop."""
    retry_initial: float = 2.0
    """First retry delay after a failed delivery, in seconds (doubles, with jitter)."""
    retry_max: float = 300.0
    """Cap of the retry delay, in seconds."""


@dataclass(frozen=True)
class TelemetryConfig:
    """OpenTelemetry export: traces and metrics over OTLP, a Prometheus scrape endpoint.

    With no endpoint here nor in the ``OTEL_EXPORTER_OTLP_*`` variables, only the store
    exporter runs (spans in the SQLite store, for the TUI and ``incidents show``).
    """

    endpoint: str = ""
    """OTLP endpoint (``http://host:4318`` for http/protobuf, ``host:4317`` for grpc); empty
    uses ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``, else none."""
    protocol: str = ""
    """``http/protobuf`` or ``grpc``; empty uses ``OTEL_EXPORTER_OTLP_PROTOCOL``, else http."""
    headers: tuple[str, ...] = ()
    """Extra export headers as ``key=value`` (merged over ``OTEL_EXPORTER_OTLP_HEADERS``);
    values are never logged."""
    timeout: float = 2.0
    """Seconds one export may take (short, so a dead endpoint never delays shutdown)."""
    max_queue_size: int = 2048
    """Spans held for export; beyond it spans are dropped and counted."""
    max_export_batch_size: int = 512
    """Spans sent in one export."""
    schedule_delay: float = 1.0
    """Seconds between span exports."""
    metrics_interval: float = 10.0
    """Seconds between metric exports over OTLP."""
    prometheus: bool = False
    """Serve a Prometheus scrape endpoint (``/metrics``)."""
    prometheus_address: str = "127.0.0.1:9464"
    """``host:port`` of the scrape endpoint."""


@dataclass(frozen=True)
class TracingConfig:
    """The server's own request traces, received over OTLP/HTTP on loopback."""

    capture_server: bool = False
    """In ``watch``, start the server with ``--otlp-traces-endpoint`` pointing at the
    receiver (and run the receiver)."""
    receiver: bool = False
    """Run the receiver even without ``capture_server`` (a server started elsewhere)."""
    receiver_address: str = "127.0.0.1:4318"
    """``host:port`` of the receiver; loopback only."""
    receiver_max_bytes: int = 4194304
    """Largest request body accepted; larger ones are rejected with 400."""


@dataclass(frozen=True)
class Config:
    """The whole configuration."""

    server: ServerConfig = field(default_factory=ServerConfig)
    """``[server]``."""
    logs: LogsConfig = field(default_factory=LogsConfig)
    """``[logs]``."""
    collectors: CollectorsConfig = field(default_factory=CollectorsConfig)
    """``[collectors]``."""
    remediation: RemediationConfig = field(default_factory=RemediationConfig)
    """``[remediation]``."""
    incidents: IncidentsConfig = field(default_factory=IncidentsConfig)
    """``[incidents]``."""
    rules: RulesConfig = field(default_factory=RulesConfig)
    """``[rules]``."""
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    """``[profiling]``."""
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    """``[alerts]``."""
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    """``[telemetry]``."""
    tracing: TracingConfig = field(default_factory=TracingConfig)
    """``[tracing]``."""
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    """``[evidence]``."""
    servers: tuple[ServerEntry, ...] = ()
    """``[[servers]]``: several servers under one doctor (instead of a command after --)."""
    ha: HAConfig = field(default_factory=HAConfig)
    """``[ha]``."""


CHOICES: dict[str, tuple[str, ...]] = {
    "remediation.mode": ("auto", "suggest", "off"),
    "remediation.on_escalation": ("stop", "keep"),
    "remediation.reset_scope": ("board", "chip"),
    "logs.read_from": ("end", "beginning"),
    "alerts.sinks.type": ("pagerduty", "slack", "alertmanager", "webhook", "command"),
    "alerts.sinks.role": ("", "page", "notify"),
    "alerts.routes.min_severity": ("info", "warning", "error", "critical"),
    "telemetry.protocol": ("", "http/protobuf", "grpc"),
}
POSITIVE = {
    "server.start_timeout",
    "server.health_interval",
    "server.probe_interval",
    "server.backoff_initial",
    "server.backoff_max",
    "logs.poll_interval",
    "logs.max_line_bytes",
    "collectors.npu_smi.interval",
    "collectors.npu_smi.timeout",
    "collectors.vllm.interval",
    "collectors.process.interval",
    "collectors.vllm.timeout",
    "collectors.vllm.baseline_seconds",
    "collectors.npu_smi.trend_window",
    "collectors.process.trend_window",
    "collectors.canary.interval",
    "collectors.canary.timeout",
    "collectors.canary.max_tokens",
    "evidence.keep",
    "evidence.max_mb",
    "remediation.command_timeout",
    "remediation.quiet_retry",
    "remediation.quiet_window",
    "remediation.probe_timeout",
    "alerts.poll_interval",
    "alerts.retry_initial",
    "alerts.retry_max",
    "alerts.sinks.timeout",
    "alerts.sinks.resend_interval",
    "telemetry.timeout",
    "telemetry.max_queue_size",
    "telemetry.max_export_batch_size",
    "telemetry.schedule_delay",
    "telemetry.metrics_interval",
    "tracing.receiver_max_bytes",
    "ha.command_timeout",
    "ha.max_wait",
}


__all__ = [
    "CHOICES",
    "POSITIVE",
    "AlertRouteConfig",
    "AlertSinkConfig",
    "AlertsConfig",
    "CanaryConfig",
    "CollectorsConfig",
    "Config",
    "EvidenceConfig",
    "IncidentsConfig",
    "LogsConfig",
    "NpuSmiConfig",
    "ProcessConfig",
    "ProfilingConfig",
    "RemediationConfig",
    "RulesConfig",
    "ServerConfig",
    "TelemetryConfig",
    "TracingConfig",
    "VllmConfig",
]
