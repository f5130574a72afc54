"""deploy/nginx: the upstream config is the one the demo and the integration test run, and a
real nginx accepts it (with its server list) as shipped."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ascend_doctor.cli.balancer import LB_TEMPLATE, SERVER_LINE, nginx_binary
from ascend_doctor.cli.nginx_drain import rewrite

DEPLOY = Path(__file__).parents[2] / "deploy" / "nginx"


def test_the_shipped_upstream_config_is_the_one_the_tests_run() -> None:
    shipped = (DEPLOY / "vllm-lb.conf").read_text()
    assert shipped == LB_TEMPLATE.format(servers="/etc/nginx/vllm-servers.conf", listen="8000")
    assert "proxy_next_upstream error timeout http_500 http_502 http_503 non_idempotent;" in (
        shipped
    )


def test_the_shipped_server_list_has_one_drainable_line_per_server() -> None:
    text = (DEPLOY / "vllm-servers.conf").read_text()
    lines = [ln + "\n" for ln in text.splitlines() if ln.startswith("server ")]
    assert lines == [
        SERVER_LINE.format(address="127.0.0.1:8001", name="vllm-a"),
        SERVER_LINE.format(address="127.0.0.1:8002", name="vllm-b"),
    ]
    assert "down; # vllm-a" in rewrite(text, "vllm-a", True)


def test_nginx_accepts_the_shipped_files(tmp_path: Path) -> None:
    binary = nginx_binary()
    if binary is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx; .ci/run does)")
    shutil.copy(DEPLOY / "vllm-servers.conf", tmp_path / "vllm-servers.conf")
    lb = (DEPLOY / "vllm-lb.conf").read_text()
    lb = lb.replace("/etc/nginx/vllm-servers.conf", str(tmp_path / "vllm-servers.conf"))
    (tmp_path / "vllm-lb.conf").write_text(lb.replace("listen 8000;", "listen 127.0.0.1:8000;"))
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        f"http {{ access_log off; include {tmp_path}/vllm-lb.conf; }}\n"
    )
    done = subprocess.run(
        [binary, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
