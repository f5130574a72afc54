"""A state dir built from fixtures for the TUI tests: a store with devices, server samples,
three incidents (one open) with findings, decisions and spans, server request traces, and a
server log whose matched lines the findings point at. Every time is fixed."""

from __future__ import annotations

from pathlib import Path

from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.events import (
    ActionResult,
    Category,
    Finding,
    IncidentState,
    LogLine,
    Outcome,
    ProcessEvent,
    ProcessState,
    Role,
    Severity,
)
from ascend_doctor.core.records import DoctorStatus, ServerStatus
from ascend_doctor.core.store import SpanRecord, Store

NOW = 1_796_212_800.0  # 2026-12-02 12:00:00Z: the injected clock
T0 = NOW - 3600
DOCTOR_PID = 424242

LOG_LINES = [
    "(APIServer pid=728) INFO 12-02 11:00:01 [api_server.py:1839] vLLM API server version 0.11.0",
    '(APIServer pid=728) INFO:     127.0.0.1:40100 - "GET /health HTTP/1.1" 200 OK',
    "(EngineCore_DP0 pid=276) ERROR 12-02 11:05:00 [core.py:710] RuntimeError: NPU out of memory."
    " Tried to allocate 2.93 GiB (NPU 0; 60.97 GiB total capacity)",
    "(APIServer pid=728) ERROR 12-02 11:05:00 [async_llm.py:480] AsyncLLM output_handler failed.",
    '(APIServer pid=728) INFO:     127.0.0.1:40102 - "POST /v1/completions HTTP/1.1" 200 OK',
    "(APIServer pid=728) WARNING 12-02 11:20:00 [scheduler.py:88] KV cache usage above 90%",
    '(APIServer pid=728) INFO:     127.0.0.1:40104 - "GET /metrics HTTP/1.1" 200 OK',
]


def _offsets(lines: list[str]) -> list[int]:
    out, pos = [], 0
    for line in lines:
        out.append(pos)
        pos += len(line.encode()) + 1
    return out


def _finding(
    rule: str,
    category: Category,
    severity: Severity,
    role: Role,
    subject: str,
    summary: str,
    at: float,
    path: str,
    offset: int,
    text: str,
) -> Finding:
    return Finding(
        rule=rule,
        category=category,
        severity=severity,
        role=role,
        subject=subject,
        summary=summary,
        at=at,
        path=path,
        offset=offset,
        evidence=(LogLine(path, offset, text),),
    )


def _span(
    trace: str,
    span: str,
    parent: str,
    name: str,
    start: float,
    end: float,
    *,
    source: str = "doctor",
    incident: int | None = None,
    status: str = "ok",
    attributes: dict[str, object] | None = None,
    events: list[dict[str, object]] | None = None,
    kind: str = "internal",
) -> SpanRecord:
    return SpanRecord(
        trace_id=trace,
        span_id=span,
        parent_id=parent,
        name=name,
        kind=kind,
        start_ns=int(start * 1e9),
        end_ns=int(end * 1e9),
        status=status,
        attributes=dict(attributes or {}),
        events=list(events or []),
        resource={"service.name": "ascend-doctor"},
        source=source,
        incident_id=incident,
    )


def build_state(state: Path, *, log_lines: list[str] | None = None, first: int = 0) -> Path:
    """Write the fixture state dir; returns it. The findings point at lines ``first + 2``,
    ``first + 3`` and ``first + 5`` of the log."""
    state.mkdir(parents=True, exist_ok=True)
    lines = LOG_LINES if log_lines is None else log_lines
    log = state / "server.log"
    log.write_text("".join(line + "\n" for line in lines))
    offs = _offsets(lines)[first:]
    lines = lines[first:]
    plog = state / "plog" / "plog-276_20261202110000000.log"
    plog.parent.mkdir(exist_ok=True)
    plog.write_text(
        "[ERROR] RUNTIME(276,python3):2026-12-02-11:05:00.000.000 rtStreamSynchronize\n"
    )
    store = Store.in_dir(state)
    store.set_doctor(
        DoctorStatus(
            pid=DOCTOR_PID,
            started_at=T0,
            mode="auto",
            dry_run=False,
            attached=False,
            remediation=RemediationConfig(),
        )
    )
    store.set_server(ServerStatus(ProcessState.RUNNING, 728, NOW - 754))
    for at, st, prev in (
        (T0 + 1, "STARTING", "STOPPED"),
        (T0 + 20, "RUNNING", "STARTING"),
        (T0 + 300, "EXITED", "RUNNING"),
        (T0 + 302, "STARTING", "EXITED"),
        (NOW - 754, "RUNNING", "STARTING"),
    ):
        store.add_process_event(
            ProcessEvent(ProcessState(st), ProcessState(prev), at, 728, None, st == "EXITED", "")
        )
    store.set_override("PYTORCH_NPU_ALLOC_CONF", "env", "expandable_segments:True", 1)
    store.set_override("--gpu-memory-utilization", "arg", "0.85", 1)
    store.set_offsets(
        [
            ("1:1", str(log), offs[-1], "h1", "1:1"),
            ("1:2", str(plog), 0, "h2", "1:2"),
        ]
    )
    for n in range(8):
        for k in range(12):
            at = NOW - (12 - k) * 5
            used = 3300 + (k * 4000 if n == 1 else 0) + n * 10
            store.add_sample(
                "npu_smi",
                f"npu{n}",
                at,
                {
                    "health": "Warning" if n == 3 else "OK",
                    "hbm_used_mb": used,
                    "hbm_total_mb": 65536,
                    "hbm_used_pct": round(100 * used / 65536, 1),
                    "aicore_pct": (k * 9 + n * 3) % 100,
                    "temp_c": 36 + n,
                    "power_w": 90 + n * 11,
                },
            )
    for k in range(10):
        store.add_sample(
            "vllm",
            "server",
            NOW - (10 - k) * 5,
            {
                "health_status": 200,
                "running": 4 + k % 3,
                "waiting": k % 2,
                "kv_cache_usage": 0.31 + k * 0.02,
                "generation_tokens_delta": 1000.0 + k * 100,
                "ttft_p99": 0.184,
            },
        )
    # incident 1: npu OOM, resolved after two decisions
    oom = _finding(
        "torch-npu-oom",
        Category.NPU_OOM,
        Severity.CRITICAL,
        Role.ROOT,
        "server",
        "NPU out of memory on NPU 0: tried to allocate 2.93 GiB",
        T0 + 300,
        str(log),
        offs[2],
        lines[2] if len(lines) > 2 else "",
    )
    one = store.open_incident(oom).id
    store.add_finding(oom, one)
    store.add_finding(
        _finding(
            "vllm-engine-dead",
            Category.ENGINE_DEAD,
            Severity.ERROR,
            Role.SYMPTOM,
            "server",
            "the engine core died",
            T0 + 300,
            str(log),
            offs[3],
            lines[3] if len(lines) > 3 else "",
        ),
        one,
    )
    store.add_action(
        one,
        ActionResult(
            "set_env",
            {"key": "PYTORCH_NPU_ALLOC_CONF", "value": "expandable_segments:True"},
            Outcome.OK,
            "set PYTORCH_NPU_ALLOC_CONF=expandable_segments:True",
            T0 + 301,
        ),
    )
    store.add_action(one, ActionResult("restart", {}, Outcome.OK, "restart the server", T0 + 302))
    store.update_incident(one, state=IncidentState.RESOLVED, resolved_at=T0 + 330, attempts=1)
    # incident 2: a device fault, escalated (reset refused)
    fault = _finding(
        "rt-heartbeat-lost",
        Category.DEVICE_FAULT,
        Severity.CRITICAL,
        Role.ROOT,
        "npu3",
        "The task scheduler lost the device heartbeat (507010)",
        T0 + 900,
        str(plog),
        0,
        "[ERROR] RUNTIME(276,python3):2026-12-02-11:05:00.000.000 rtStreamSynchronize",
    )
    two = store.open_incident(fault).id
    store.add_finding(fault, two)
    store.add_action(
        two,
        ActionResult(
            "reset_device",
            {"device": 3},
            Outcome.REFUSED,
            "remediation.allow_device_reset is off",
            T0 + 901,
        ),
    )
    store.add_action(
        two, ActionResult("escalate", {}, Outcome.OK, "reset_device: refused", T0 + 901)
    )
    store.update_incident(two, state=IncidentState.ESCALATED, resolved_at=T0 + 901)
    # incident 3: kv cache, still open (a dry-run decision)
    kv = _finding(
        "vllm-kv-cache-usage-high",
        Category.KV_CACHE_INSUFFICIENT,
        Severity.WARNING,
        Role.ROOT,
        "server",
        "KV cache usage above 90% for 60s",
        NOW - 600,
        str(log),
        offs[5],
        lines[5] if len(lines) > 5 else "",
    )
    three = store.open_incident(kv).id
    store.add_finding(kv, three)
    store.add_action(
        three,
        ActionResult(
            "lower_max_model_len",
            {"from": 32768, "to": 16128},
            Outcome.DRY_RUN,
            "dry_run: would lower --max-model-len from 32768 to 16128",
            NOW - 590,
        ),
    )
    # the incidents' traces and two server request traces
    spans = []
    for inc, base, cat, ok in (
        (one, T0 + 300, "npu_oom", True),
        (two, T0 + 900, "device_fault", False),
    ):
        trace = f"{inc:032x}"
        root = f"{inc:08x}00000001"
        spans += [
            _span(
                trace,
                root,
                "",
                f"incident {cat}",
                base,
                base + 31,
                incident=inc,
                attributes={"incident.id": inc, "incident.category": cat},
            ),
            _span(
                trace,
                f"{inc:08x}00000002",
                root,
                "detect",
                base,
                base + 1.2,
                incident=inc,
                attributes={"rule": "torch-npu-oom" if ok else "rt-heartbeat-lost"},
                events=[
                    {
                        "name": "finding",
                        "time_ns": int((base + 0.5) * 1e9),
                        "attributes": {"path": "server.log"},
                    }
                ],
            ),
            _span(
                trace,
                f"{inc:08x}00000003",
                root,
                "remediate.set_env" if ok else "remediate.reset_device",
                base + 1.2,
                base + 2.5,
                incident=inc,
                status="ok" if ok else "error: refused",
            ),
            _span(
                trace,
                f"{inc:08x}00000004",
                root,
                "verify",
                base + 2.5,
                base + 31,
                incident=inc,
                status="ok" if ok else "error: escalated",
            ),
        ]
    for k in range(2):
        trace = f"{0xABC0 + k:032x}"
        start = NOW - 60 + k * 10
        spans += [
            _span(
                trace,
                f"{0xABC0 + k:016x}",
                "",
                "POST /v1/completions",
                start,
                start + 0.84,
                source="server",
                kind="server",
                attributes={"http.status_code": 200},
            ),
            _span(
                trace,
                f"{0xABD0 + k:016x}",
                f"{0xABC0 + k:016x}",
                "llm_request",
                start + 0.01,
                start + 0.8,
                source="server",
                attributes={"gen_ai.usage.output_tokens": 128},
            ),
        ]
    store.add_spans(spans)
    store.close()
    return state
