"""The fake ``vllm serve``: ``python -m ascend_doctor.sim.vllm serve MODEL [flags]``.

This process is vLLM's API server (``(APIServer pid=N)``). It parses the command line strictly,
as the host's installed release does (sim/versions.py), resolves the config, binds its port,
and starts the engine core as a child process (``VLLM::EngineCore``), which starts its workers.
It serves HTTP once the engine is ready; after a runtime engine death it shuts down and exits
with status 0, as vLLM does; a failed engine start makes it exit 1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType

import psutil

from ascend_doctor.sim import vllm_text as txt
from ascend_doctor.sim.engine_client import EngineClient
from ascend_doctor.sim.engine_core import ServeConfig
from ascend_doctor.sim.ipc import spawn
from ascend_doctor.sim.models import get_profile as model_profile
from ascend_doctor.sim.otlp import SpanSender
from ascend_doctor.sim.state import STATE_ENV, read_state
from ascend_doctor.sim.versions import VERSION_ENV, VersionProfile, get_profile
from ascend_doctor.sim.vllm_args import build_config, dynamic_profiling, parse_args, profiler_dir
from ascend_doctor.sim.vllm_http import SimServer
from ascend_doctor.sim.vllm_metrics import VllmMetrics
from ascend_doctor.sim.vlog import API, VllmOut


def installed_version() -> VersionProfile:
    """The release installed on the host: $ASCEND_SIM_VLLM_VERSION, else the host state."""
    name = os.environ.get(VERSION_ENV)
    state_file = os.environ.get(STATE_ENV)
    if not name and state_file and Path(state_file).exists():
        name = read_state(Path(state_file)).get("vllm_version")
    return get_profile(name)


def _banner(out: VllmOut, version: VersionProfile, model: str) -> None:
    if not version.logo_banner:
        out.log("INFO", "api_server.py:1839", f"vLLM API server version {version.vllm}")
        return
    # log_version_and_model: the logo, monochrome when stdout is not a terminal.
    out.log(
        "INFO",
        "utils.py:299",
        "\n       █     █     █▄   ▄█\n"
        f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version.vllm}\n"
        f"  █▄█▀ █     █     █     █  model   {model}\n"
        "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\n",
    )


class ApiServer:
    """One run of the fake server, from the parsed config to the exit status."""

    def __init__(self, cfg: ServeConfig, version: VersionProfile, out: VllmOut) -> None:
        self.cfg, self.version, self.out = cfg, version, out
        self.stop = threading.Event()
        self.httpd: SimServer | None = None
        self.engine: EngineClient | None = None

    def _fail_config(self) -> int | None:
        cfg, profile = self.cfg, model_profile(self.cfg.model)
        if cfg.max_model_len > profile.max_position:
            self.out.raw(
                txt.api_value_error(
                    f"User-specified max_model_len ({cfg.max_model_len}) is greater than the "
                    f"derived max_model_len (max_position_embeddings={profile.max_position} or "
                    "model_max_length=None in model's config.json). To allow overriding this "
                    "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
                )
            )
            return 1
        if len(cfg.devices) < cfg.tensor_parallel_size:
            self.out.raw(
                txt.api_value_error(
                    f"tensor_parallel_size ({cfg.tensor_parallel_size}) is larger than the "
                    f"number of visible devices ({len(cfg.devices)})."
                )
            )
            return 1
        return None

    def run(self, prof_dir: Path | None, dynamic: bool, otlp: str | None) -> int:
        """Start the engine, serve until stopped or dead, shut down; the exit status."""
        cfg, out = self.cfg, self.out
        rc = self._fail_config()
        if rc is not None:
            return rc
        out.log(
            "INFO",
            "model.py:547",
            f"Resolved architecture: {model_profile(cfg.model).architecture}",
        )
        out.log("INFO", "model.py:1510", f"Using max model len {cfg.max_model_len}")
        # Bind before the engine starts, like vLLM: probes during loading get no answer.
        self.httpd = SimServer((cfg.host, cfg.port), cfg, self.version, out, prof_dir)
        if otlp:
            self.httpd.spans = SpanSender(otlp)
        if prof_dir is not None:
            warning = (
                "Torch Profiler is enabled in the API server. This should ONLY be used for "
                "local development!"
                if self.version.line == "0.11"
                else "Profiler with mode 'torch' is enabled in the API server. This should ONLY "
                "be used for local development!"
            )
            out.log("WARNING", "api_router.py:41", warning)
        proc, ch = spawn("ascend_doctor.sim.engine_proc", [])
        ch.send(
            {
                "cfg": cfg.to_json(),
                "version": self.version.line,
                "profiler_dir": str(prof_dir) if prof_dir else None,
                "dynamic": dynamic,
            }
        )
        self.engine = EngineClient(ch, out, VllmMetrics(cfg, self.version))
        self.httpd.engine = self.engine
        self.engine.start()
        while not self.engine.ready.wait(0.05):
            if self.stop.is_set():
                return self._shutdown(proc, serving=False)
        if self.engine.init_failed is not None or self.engine.dead.is_set():
            proc.wait()
            out.raw(txt.engine_init_failed(self.engine.init_failed or "{}"))
            return 1
        return self._serve(proc)

    def _serve(self, proc: object) -> int:
        cfg, out = self.cfg, self.out
        assert self.httpd is not None and self.engine is not None
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        url = f"http://{cfg.host}:{cfg.port}"
        out.log("INFO", "api_server.py:1912", self.version.start_line.format(url=url))
        out.log("INFO", "launcher.py:34", "Available routes are:")
        routes = ["/health", "/metrics", "/version", "/v1/models", "/v1/completions"]
        if self.httpd.profiler_dir is not None:
            routes += ["/start_profile", "/stop_profile"]
        for route in routes:
            methods = "POST" if route.startswith(("/v1/c", "/start", "/stop")) else "GET, HEAD"
            out.log("INFO", "launcher.py:42", f"Route: {route}, Methods: {methods}")
        out.raw(f"INFO:     Started server process [{os.getpid()}]")
        out.raw("INFO:     Waiting for application startup.")
        out.raw("INFO:     Application startup complete.")
        interval = float(os.environ.get("VLLM_LOG_STATS_INTERVAL", "10"))
        if cfg.log_stats:
            threading.Thread(
                target=self.engine.log_stats, args=(self.stop, interval), daemon=True
            ).start()
        while not self.stop.wait(0.05):
            if self.engine.dead.is_set():
                out.log("ERROR", "async_llm.py:480", txt.API_DEAD)
                # Linger briefly so /health can answer 503, then go like vLLM does.
                self.stop.wait(0.5)
                out.log(
                    "CRITICAL",
                    "launcher.py:138",
                    "AsyncLLMEngine has failed, terminating server process",
                )
                break
        return self._shutdown(proc, serving=True)

    def _shutdown(self, proc: object, serving: bool) -> int:
        out = self.out
        dead = self.engine is not None and self.engine.dead.is_set()
        if serving and not dead:
            out.log("INFO", "launcher.py:110", "Shutting down FastAPI HTTP server.")
        if self.httpd is not None and serving:
            self.httpd.shutdown()
        if self.engine is not None:
            self.engine.shutdown()
        _stop_engine(proc)
        if serving:
            out.raw(
                "INFO:     Shutting down\nINFO:     Waiting for application shutdown.\n"
                "INFO:     Application shutdown complete.\n"
                f"INFO:     Finished server process [{os.getpid()}]"
            )
        return 0


def _stop_engine(proc: object) -> None:
    """vLLM's ``shutdown(procs)``: SIGTERM, 5 s to go, then SIGKILL the process tree
    (vllm/v1/utils.py ``shutdown``, ``kill_process_tree``)."""
    if not isinstance(proc, subprocess.Popen):
        return
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=5)
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        tree = [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]
    except psutil.NoSuchProcess:
        return
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.wait()


def main(argv: list[str] | None = None) -> int:
    """Run the fake server; returns the process exit status."""
    version = installed_version()
    ns = parse_args(list(sys.argv[1:] if argv is None else argv), version)
    out = VllmOut(API, os.getpid(), colored=version.prefix_always_colored)
    _banner(out, version, ns.model_tag)
    cfg = build_config(ns, version)
    out.log("INFO", "utils.py:233", f"non-default args: {cfg.non_default!r}")
    prof_dir = profiler_dir(ns, version)
    if (
        prof_dir is not None
        and version.profiler == "both"
        and getattr(ns, "profiler_config", None) is None
    ):
        out.log(
            "WARNING",
            "profiler.py:96",
            "Using VLLM_TORCH_PROFILER_DIR environment variable is deprecated and will be "
            "removed in v0.14.0 or v1.0.0, whichever is soonest. Please use "
            "--profiler-config.torch_profiler_dir command line argument or "
            "ProfilerConfig(torch_profiler_dir=...) config field instead.",
        )
    server = ApiServer(cfg, version, out)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        server.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return server.run(prof_dir, dynamic_profiling(), getattr(ns, "otlp_traces_endpoint", None))
    except OSError as exc:
        out.raw(f"OSError: {exc}")
        return 1
    finally:
        if server.httpd is not None:
            server.httpd.server_close()


if __name__ == "__main__":
    sys.exit(main())
