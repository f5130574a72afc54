"""The fake ``vllm serve``: ``python -m ascend_doctor.sim.vllm serve MODEL [flags]``.

It prints vLLM-Ascend's start-up and failure output, writes CANN plogs, holds
the used devices in the simulated host's state, and serves the HTTP endpoints
the doctor probes. The failure paths are the point: a KV cache too small for
``--max-model-len`` (exit 1), an unhealthy device at start-up (exit 1), NPU OOM
at run time and a device fault at run time (both exit 0, as real vLLM does).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from ascend_doctor.sim import vllm_text as txt
from ascend_doctor.sim.engine_core import Engine, ServeConfig
from ascend_doctor.sim.models import (
    HBM_GIB,
    MemoryPlan,
    activation_headroom,
    get_profile,
    plan_memory,
)
from ascend_doctor.sim.msprof import DYNAMIC_KEY
from ascend_doctor.sim.otlp import SpanSender
from ascend_doctor.sim.state import (
    STATE_ENV,
    find_device,
    prune_dead,
    read_state,
    take_quirk,
    update_state,
)
from ascend_doctor.sim.vllm_args import build_config, dynamic_profiling, parse_args, profiler_dir
from ascend_doctor.sim.vllm_http import VERSION, SimServer
from ascend_doctor.sim.vlog import API, ENGINE, Plog, VllmOut, log_root_from_env


class Server:
    """One run of the fake server, from argv to exit status."""

    def __init__(
        self,
        cfg: ServeConfig,
        out: VllmOut,
        profiler_dir: Path | None = None,
        dynamic: bool = False,
    ) -> None:
        self.cfg, self.out = cfg, out
        self.profiler_dir, self.dynamic = profiler_dir, dynamic
        self.pid = out.pid
        env_state = os.environ.get(STATE_ENV)
        self.state_path = Path(env_state) if env_state else None
        self.stop = threading.Event()
        self.plog = Plog(log_root_from_env(), self.pid, cfg.devices)
        self.httpd: SimServer | None = None
        self.otlp: SpanSender | None = None
        """Request span exporter, with --otlp-traces-endpoint."""

    # -- shared state ---------------------------------------------------------------
    def _state(self) -> dict[str, Any] | None:
        return read_state(self.state_path) if self.state_path else None

    def register(self) -> None:
        """Hold the used devices in the host state, as the driver would list us."""
        if self.state_path is None:
            return
        mem = int(HBM_GIB * 1024 * self.cfg.gpu_memory_utilization)
        with update_state(self.state_path) as state:
            state["processes"] = [p for p in state["processes"] if p["pid"] != self.pid]
            for d in self.cfg.devices:
                state["processes"].append(
                    {"device": d, "pid": self.pid, "name": "python3", "memory_mb": mem}
                )
            if self.dynamic:
                # What msprof --dynamic=on checks before it attaches.
                pids = [p for p in state.get(DYNAMIC_KEY, []) if p != self.pid]
                state[DYNAMIC_KEY] = [*pids, self.pid]

    def deregister(self) -> None:
        """Release the devices; safe to call more than once, from atexit too."""
        if self.state_path is None or not self.state_path.exists():
            return
        with update_state(self.state_path) as state:
            state["processes"] = [p for p in state["processes"] if p["pid"] != self.pid]
            if DYNAMIC_KEY in state:
                state[DYNAMIC_KEY] = [p for p in state[DYNAMIC_KEY] if p != self.pid]

    # -- start-up -------------------------------------------------------------------
    def _fail(self, engine_text: str, failed: str) -> int:
        self.out.log(ENGINE, "ERROR", "core.py:708", engine_text)
        self.out.raw(API, txt.engine_init_failed(failed))
        return 1

    def _check_devices(self, state: dict[str, Any] | None) -> int | None:
        if state is None:
            return None
        for logical, d in enumerate(self.cfg.devices):
            dev = find_device(state, d)
            if dev is None or dev["health"] != "OK":
                self.plog.write(
                    "ERROR",
                    "RUNTIME",
                    "device.cc:1163",
                    f"Set device failed, device_id={d}, error code is 507033",
                )
                return self._fail(txt.set_device_error(self.pid, logical), "{}")
        prune_dead(state)
        for d in self.cfg.devices:
            foreign_mb = sum(
                p["memory_mb"]
                for p in state["processes"]
                if p["device"] == d and p["pid"] != self.pid
            )
            free = HBM_GIB - foreign_mb / 1024
            if foreign_mb and free < self.cfg.gpu_memory_utilization * HBM_GIB:
                err = txt.free_memory_error(free, HBM_GIB, self.cfg.gpu_memory_utilization)
                return self._fail(err, "{'EngineCore_DP0': 1}")
        return None

    def _load(self, state: dict[str, Any] | None) -> MemoryPlan | int:
        cfg = self.cfg
        load_seconds = float(state.get("load_seconds", 0.5)) if state else 0.5
        self.out.log(
            ENGINE, "INFO", "model_runner_v1.py:2303", f"Starting to load model {cfg.model}..."
        )
        if self.stop.wait(load_seconds):
            return 0
        plan = plan_memory(
            get_profile(cfg.model),
            cfg.gpu_memory_utilization,
            cfg.tensor_parallel_size,
            cfg.block_size,
        )
        self.out.log(
            ENGINE,
            "INFO",
            "default_loader.py:267",
            f"Loading weights took {load_seconds:.2f} seconds",
        )
        self.out.log(
            ENGINE,
            "INFO",
            "model_runner_v1.py:2345",
            f"Loading model weights took {plan.weights_gib:.4f} GB",
        )
        if self.state_path is not None and take_quirk(self.state_path, "aicore") == "always":
            return self._aicore_exception()
        if plan.available_bytes <= 0:
            return self._fail(txt.no_cache_memory_error(), "{'EngineCore_DP0': 1}")
        self.out.log(
            ENGINE,
            "INFO",
            "worker_v1.py:245",
            f"Available KV cache memory: {plan.available_gib:.2f} GiB",
        )
        if plan.needed_bytes(cfg.max_model_len) > plan.available_bytes:
            return self._fail(txt.kv_cache_error(plan, cfg.max_model_len), "{'EngineCore_DP0': 1}")
        self.out.log(
            ENGINE,
            "INFO",
            "kv_cache_utils.py:1087",
            f"GPU KV cache size: {plan.capacity_tokens:,} tokens",
        )
        self.out.log(
            ENGINE,
            "INFO",
            "kv_cache_utils.py:1091",
            f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: "
            f"{plan.capacity_tokens / cfg.max_model_len:.2f}x",
        )
        if cfg.enforce_eager:
            return plan
        capture_fails = (
            self.state_path is not None and take_quirk(self.state_path, "graph_capture") == "fail"
        )
        self.out.log(
            ENGINE,
            "INFO",
            "acl_graph.py:150",
            "Capturing ACL graphs (mixed prefill-decode, PIECEWISE): 67 sizes",
        )
        if capture_fails:
            return self._capture_failure()
        self.out.log(
            ENGINE, "INFO", "model_runner_v1.py:3120", "Graph capturing finished in 1 secs"
        )
        return plan

    def _worker_error(self, text: str) -> None:
        for line in text.splitlines():
            self.out.log("Worker_TP0", "ERROR", "multiproc_executor.py:654", line)

    def _capture_failure(self) -> int:
        """A synchronous copy in the model path is not allowed while capturing (107030)."""
        self.plog.write(
            "ERROR",
            "RUNTIME",
            "api_c.cc:1097",
            "rtMemcpy:ErrCode=107030, desc=[the current capture mode does not support this"
            " operation], InnerCode=0x703001c",
        )
        self._worker_error(
            "RuntimeError: capture_end:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:247 "
            "NPU function error: c10_npu::acl::AclmdlRICaptureEnd(capture_stream_, &model_ri_),"
            " error code is 107030"
        )
        return self._fail(
            "RuntimeError: Worker failed with error 'ACL graph capture failed', please check "
            "the stack trace above for the root cause",
            "{'EngineCore_DP0': 1}",
        )

    def _aicore_exception(self) -> int:
        """The profile run's first kernel raises an AI Core exception, at every start."""
        device = self.cfg.devices[0] if self.cfg.devices else 0
        self.plog.write(
            "ERROR",
            "RUNTIME",
            "device_error_core_proc.cc:1060",
            f"PrintCoreInfo:The error from device(chipId:{device}, dieId:0), serial number is 7,"
            " there is an exception of fftsplus aicore error, core id is 7, error code = 0,"
            " dump info: pc start: 0x12c0c136b000",
        )
        self._worker_error(
            f"EZ9999: [PID: {self.pid}] The error from device(chipId:{device}, dieId:0), serial"
            " number is 8, there is an exception of aivec error, core id is 40, error code = 0,"
            " dump info: pc start: 0x124101423000, current: 0x12410142395c."
            "[FUNC:ProcessStarsCoreErrorInfo][FILE:device_error_core_proc.cc][LINE:303]"
        )
        return self._fail(
            "RuntimeError: Worker failed with error 'The Inner error is reported as above.',"
            " please check the stack trace above for the root cause",
            "{'EngineCore_DP0': 1}",
        )

    def run(self) -> int:
        """Start up, serve until stopped or dead, shut down; return the exit status."""
        cfg, out = self.cfg, self.out
        profile = get_profile(cfg.model)
        if cfg.max_model_len > profile.max_position:
            out.raw(
                API,
                txt.api_value_error(
                    f"User-specified max_model_len ({cfg.max_model_len}) is greater than the "
                    f"derived max_model_len (max_position_embeddings={profile.max_position} or "
                    "model_max_length=None in model's config.json). To allow overriding this "
                    "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
                ),
            )
            return 1
        if len(cfg.devices) < cfg.tensor_parallel_size:
            out.raw(
                API,
                txt.api_value_error(
                    f"tensor_parallel_size ({cfg.tensor_parallel_size}) is larger than the "
                    f"number of visible devices ({len(cfg.devices)})."
                ),
            )
            return 1
        out.log(API, "INFO", "model.py:547", f"Resolved architecture: {profile.architecture}")
        out.log(API, "INFO", "model.py:1510", f"Using max model len {cfg.max_model_len}")
        # Bind before the engine starts, like vLLM: probes during loading get no answer.
        self.httpd = SimServer((cfg.host, cfg.port), self.profiler_dir)
        self.httpd.spans = self.otlp
        if self.profiler_dir is not None:
            out.log(
                API,
                "WARNING",
                "api_router.py:57",
                "Profiler with mode 'torch' is enabled in the API server. "
                "This should ONLY be used for local development!",
            )
            out.log(
                ENGINE,
                "INFO",
                "worker_v1.py:412",
                f"Profiling enabled. Traces will be saved to: {self.profiler_dir}",
            )
        out.log(
            ENGINE,
            "INFO",
            "core.py:77",
            f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{cfg.model}', "
            f"max_seq_len={cfg.max_model_len}, tensor_parallel_size={cfg.tensor_parallel_size}, "
            f"device_config=npu, enforce_eager={cfg.enforce_eager}",
        )
        self.plog.write(
            "EVENT", "RUNTIME", "runtime.cc:1652", f"rtSetDevice: devices={cfg.devices}"
        )
        state = self._state()
        rc = self._check_devices(state)
        if rc is not None:
            return rc
        self.register()
        loaded = self._load(state)
        if isinstance(loaded, int):
            return loaded
        return self._serve(loaded)

    def _serve(self, plan: MemoryPlan) -> int:
        cfg, out = self.cfg, self.out
        headroom = activation_headroom(plan, cfg.gpu_memory_utilization, cfg.expandable_segments)
        engine = Engine(cfg, plan, headroom, out, self.plog)
        engine.state_path = self.state_path
        engine.stop = self.stop
        assert self.httpd is not None
        self.httpd.engine = engine
        threading.Thread(
            target=self.httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="http",
        ).start()
        out.log(
            API,
            "INFO",
            "api_server.py:1885",
            f"Starting vLLM API server 0 on http://{cfg.host}:{cfg.port}",
        )
        routes = [
            ("/health", "GET"),
            ("/metrics", "GET"),
            ("/version", "GET"),
            ("/v1/models", "GET"),
            ("/v1/completions", "POST"),
        ]
        if self.profiler_dir is not None:
            routes += [("/start_profile", "POST"), ("/stop_profile", "POST")]
        out.log(
            API,
            "INFO",
            "launcher.py:34",
            "Available routes are:\n" + "\n".join(f"Route: {r}, Methods: {m}" for r, m in routes),
        )
        out.raw(API, f"INFO:     Started server process [{self.pid}]")
        out.raw(API, "INFO:     Waiting for application startup.")
        out.raw(API, "INFO:     Application startup complete.")
        if self.state_path is not None:
            args = (self.state_path, self.stop)
            threading.Thread(target=engine.watch_faults, args=args, daemon=True).start()
        interval = float(os.environ.get("VLLM_LOG_STATS_INTERVAL", "10"))
        threading.Thread(target=engine.log_stats, args=(self.stop, interval), daemon=True).start()
        while not self.stop.wait(0.05):
            if engine.dead.is_set():
                # Linger briefly so /health can answer 503, then go like vLLM does.
                self.stop.wait(0.5)
                out.log(
                    API,
                    "CRITICAL",
                    "launcher.py:138",
                    "AsyncLLMEngine has failed, terminating server process",
                )
                break
        if not engine.dead.is_set():
            out.log(API, "INFO", "launcher.py:110", "Shutting down FastAPI HTTP server.")
        self.httpd.shutdown()
        out.raw(
            API,
            "INFO:     Shutting down\nINFO:     Waiting for application shutdown.\n"
            "INFO:     Application shutdown complete.\n"
            f"INFO:     Finished server process [{self.pid}]",
        )
        return 0


def main(argv: list[str] | None = None) -> int:
    """Run the fake server; returns the process exit status."""
    ns, unknown = parse_args(list(sys.argv[1:] if argv is None else argv))
    out = VllmOut(os.getpid())
    cfg = build_config(ns)
    out.log(API, "INFO", "api_server.py:1839", f"vLLM API server version {VERSION}")
    if unknown:
        out.log(API, "WARNING", "arg_utils.py:1121", f"Ignoring unsupported arguments: {unknown}")
    out.log(API, "INFO", "utils.py:233", f"non-default args: {cfg.non_default!r}")
    server = Server(cfg, out, profiler_dir(ns), dynamic_profiling())
    if ns.otlp_traces_endpoint:
        server.otlp = SpanSender(ns.otlp_traces_endpoint)
    atexit.register(server.deregister)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        server.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return server.run()
    except OSError as exc:
        out.raw(API, f"OSError: {exc}")
        return 1
    finally:
        if server.httpd is not None:
            server.httpd.server_close()
        server.deregister()


if __name__ == "__main__":
    sys.exit(main())
