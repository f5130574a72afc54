"""Helpers of the sim tests: free ports and a fake server subprocess runner."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import httpx
import pytest

from ascend_doctor.sim.host import SimHost


def free_port() -> int:
    """A port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServerRun:
    """One fake ``vllm serve`` subprocess with its output in a file."""

    def __init__(self, host: SimHost, model: str, flags: list[str], env: dict[str, str]) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.out_path = host.root / f"server-{self.port}.out"
        argv = host.serve_argv(model, ["--host", "127.0.0.1", "--port", str(self.port), *flags])
        with self.out_path.open("w") as out:
            self.proc = subprocess.Popen(
                argv,
                env={**os.environ, **host.env(), "VLLM_LOG_STATS_INTERVAL": "0.3", **env},
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

    def close(self) -> None:
        """Kill the server if still running and release the client."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.client.close()
