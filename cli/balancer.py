"""A private nginx in front of several servers, and steady client traffic through it: what the
demo's two-instance tour and the integration tests run (docs/high-availability.md).

nginx runs in the foreground with its own prefix and config in a directory of ours (no system
config, no root needed, loopback only); its upstream directives are deploy/nginx/vllm-lb.conf's
(``LB_TEMPLATE``; tests/deploy checks that the two agree). The load generator counts every
request that did not come back 200 with choices: the number the layout must keep at zero.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

LB_TEMPLATE = """\
# nginx in front of two vLLM-Ascend instances on one Atlas server (docs/high-availability.md).
# Include it in the http block (e.g. /etc/nginx/conf.d/vllm-lb.conf); the server list is its
# own file so that ascend-doctor-nginx-drain can mark one "down" and reload nginx.

upstream vllm {{
    # server 127.0.0.1:8001 ...; # NAME  (one line per [[servers]] name of the doctor's config)
    include {servers};
    keepalive 32;
}}

server {{
    listen {listen};

    location / {{
        proxy_pass http://vllm;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        # Passive health checks: a connection refused, a timeout or one of the codes below
        # sends the request to the other instance and counts against this one
        # (max_fails/fail_timeout on its server line).
        # http_500: vLLM answers 500 ("EngineCore encountered an issue") to every request in
        # flight when its engine dies; http_502/http_503: a server stopping or starting.
        # non_idempotent: completions are POSTs; nginx retries a POST only with it. A request
        # that failed this way produced no answer, so sending it to the other instance is safe.
        proxy_next_upstream error timeout http_500 http_502 http_503 non_idempotent;
        proxy_next_upstream_tries 2;
        proxy_connect_timeout 2s;
        # generation takes long; streamed answers go out as they come
        proxy_read_timeout 600s;
        proxy_buffering off;
    }}
}}
"""
"""deploy/nginx/vllm-lb.conf with its listen address and server-list path as fields."""

SERVER_LINE = "server {address} max_fails=1 fail_timeout=10s; # {name}\n"
"""One line of the server list (deploy/nginx/vllm-servers.conf)."""

_MAIN = """\
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 256; }}
http {{
    # which instance each request went to and what it answered: the tries behind a failure
    log_format tries '$time_local "$request" $status up=$upstream_addr got=$upstream_status';
    access_log {prefix}/access.log tries;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    include {prefix}/vllm-lb.conf;
}}
"""


def nginx_binary() -> str | None:
    """nginx on PATH (Debian installs it in /usr/sbin, often not on a user's PATH)."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


@dataclass
class Balancer:
    """One nginx of ours, in the foreground, listening on loopback."""

    prefix: Path
    """Its prefix: config, pid file, logs, temp files."""
    port: int
    """Where clients reach it."""
    binary: str
    """The nginx binary."""
    proc: subprocess.Popen[bytes] | None = None
    """The master process, while it runs."""

    @property
    def servers_file(self) -> Path:
        """The upstream's server list, the file the drain command rewrites."""
        return self.prefix / "vllm-servers.conf"

    @property
    def url(self) -> str:
        """Base URL of the balancer."""
        return f"http://127.0.0.1:{self.port}"

    def nginx_argv(self) -> list[str]:
        """nginx with this balancer's prefix and config (add ``-s reload``, ``-t``...)."""
        return [self.binary, "-p", str(self.prefix), "-c", str(self.prefix / "nginx.conf")]

    def drain_argv(self, action: str) -> list[str]:
        """The ``[ha] drain_command`` (``down``) or ``undrain_command`` (``up``) for it."""
        return [
            sys.executable,
            "-m",
            "ascend_doctor.cli.nginx_drain",
            action,
            "{name}",
            "--servers",
            str(self.servers_file),
            "--",
            *self.nginx_argv(),
        ]

    def start(self, servers: Sequence[tuple[str, str]]) -> None:
        """Write the config for ``servers`` ((name, host:port)) and start nginx."""
        (self.prefix / "tmp").mkdir(parents=True, exist_ok=True)
        self.servers_file.write_text(
            "".join(SERVER_LINE.format(address=a, name=n) for n, a in servers)
        )
        (self.prefix / "vllm-lb.conf").write_text(
            LB_TEMPLATE.format(servers=self.servers_file, listen=f"127.0.0.1:{self.port}")
        )
        (self.prefix / "nginx.conf").write_text(_MAIN.format(prefix=self.prefix))
        with open(self.prefix / "nginx.out", "ab") as out:  # the child keeps its own copy
            self.proc = subprocess.Popen(
                [*self.nginx_argv(), "-g", "daemon off;"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def ready(self) -> bool:
        """nginx accepts connections. A request would do, but it would reach the upstreams,
        and one that failed before they started marks them down for fail_timeout."""
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1.0):
            return True
        return False

    def stop(self) -> None:
        """Stop nginx (SIGQUIT: graceful; then kill)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Load:
    """Steady completions through the balancer from a few threads; counts what failed."""

    url: str
    """Base URL to send to."""
    model: str
    """The served model name."""
    workers: int = 2
    """Requests in flight at once."""
    pause: float = 0.05
    """Seconds each worker rests between requests (the machine is shared)."""
    timeout: float = 30.0
    """Seconds one request may take before it counts as failed."""
    ok: int = 0
    """Requests answered 200 with choices."""
    failed: int = 0
    """Requests that were not."""
    failures: list[str] = field(default_factory=list)
    """Why, for the first few."""
    retried: int = 0
    """Requests sent again because the balancer closed a kept-alive connection before any
    response (see ``_post``)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Start sending."""
        for i in range(self.workers):
            t = threading.Thread(target=self._run, name=f"load-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Stop sending and wait for the requests in flight."""
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 5)

    @property
    def sent(self) -> int:
        """Requests answered or failed so far."""
        return self.ok + self.failed

    def _run(self) -> None:
        body = {"model": self.model, "prompt": "The capital of France is", "max_tokens": 4}
        with httpx.Client(timeout=self.timeout, trust_env=False) as client:
            while not self._stop.is_set():
                why = ""
                try:
                    r = self._post(client, body)
                    if r.status_code != 200 or not r.json().get("choices"):
                        why = f"{r.status_code}: {r.text[:120]}"
                except (httpx.HTTPError, ValueError) as exc:
                    why = f"{type(exc).__name__}: {exc}"
                with self._lock:
                    if why:
                        self.failed += 1
                        if len(self.failures) < 20:
                            self.failures.append(f"{time.strftime('%H:%M:%S')} {why}")
                    else:
                        self.ok += 1
                self._stop.wait(self.pause)

    def _post(self, client: httpx.Client, body: dict[str, object]) -> httpx.Response:
        """One completion, sent once more when the connection closed before any response.

        A graceful ``nginx -s reload`` (how the balancer drains an instance) makes the old
        workers close their idle kept-alive connections; a request written on one at that
        moment is never read, and the client sees the connection close with no response.
        Clients retry that: the OpenAI SDK retries connection errors twice by default. Only
        that error is retried, once, and counted; a response of any status, a timeout or a
        refused connection is the request's result."""
        url = self.url + "/v1/completions"
        try:
            return client.post(url, json=body)
        except httpx.RemoteProtocolError:
            with self._lock:
                self.retried += 1
            return client.post(url, json=body)


__all__ = ["LB_TEMPLATE", "SERVER_LINE", "Balancer", "Load", "nginx_binary"]
