"""Helpers of the sim tests: free ports and a fake server subprocess runner."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import httpx
import psutil
import pytest

from ascend_doctor.sim.host import SimHost
from ascend_doctor.sim.versions import VERSION_ENV


def free_port() -> int:
    """A port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServerRun:
    """One fake ``vllm serve`` subprocess with its output in a file."""

    def __init__(
        self,
        host: SimHost,
        model: str,
        flags: list[str],
        env: dict[str, str],
        version: str | None = None,
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.out_path = host.root / f"server-{self.port}.out"
        argv = host.serve_argv(model, ["--host", "127.0.0.1", "--port", str(self.port), *flags])
        with self.out_path.open("w") as out:
            self.proc = subprocess.Popen(
                argv,
                start_new_session=True,
                env={
                    **os.environ,
                    **host.env(),
                    "VLLM_LOG_STATS_INTERVAL": "0.3",
                    **({VERSION_ENV: version} if version else {}),
                    **env,
                },
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.client = httpx.Client(trust_env=False, timeout=2.0)

    def output(self) -> str:
        """Everything the server printed so far."""
        return self.out_path.read_text()

    def wait_healthy(self, timeout: float = 10.0) -> None:
        """Block until /health answers 200; fail the test if the server exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited {self.proc.returncode}:\n{self.output()}")
            try:
                if self.client.get(f"{self.base}/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        pytest.fail(f"server not healthy in {timeout}s:\n{self.output()}")

    def wait(self, timeout: float = 10.0) -> int:
        """Exit status of the server (killed and failed if it does not exit)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"server did not exit in {timeout}s:\n{self.output()}")

    def tree(self) -> list[psutil.Process]:
        """The server's live descendants (engine core, workers), children first."""
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def engine_pid(self) -> int:
        """The pid of the ``VLLM::EngineCore`` child."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for p in self.tree():
                try:
                    if p.cmdline()[:1] == ["VLLM::EngineCore"]:
                        return p.pid
                except psutil.Error:
                    continue
            time.sleep(0.05)
        pytest.fail(f"no VLLM::EngineCore child:\n{self.output()}")

    def close(self) -> None:
        """Kill the server if still running and release the client."""
        # the whole process group: the engine core and workers (one stuck in the driver too)
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.client.close()
