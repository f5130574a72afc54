"""docs/quickstart.md, followed literally: its shell blocks run in bash, in order, and reach a
watched (simulated) server that the doctor has fixed; then a broken card is one incident that
waits for a human, until step 7 acknowledges it. Step 1's clone and install are this test's own
environment (its --version line runs); step 2's full tour is run by test_scenarios and
test_cli_inputs, here its --list line runs and the doc's count of scenarios is checked."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ascend_doctor.cli.demo import free_port
from tests.conftest import poll

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def _block(blocks: list[str], needle: str) -> str:
    found = [b for b in blocks if needle in b]
    assert len(found) == 1, f"one ```sh block of docs/quickstart.md contains {needle!r}"
    return found[0]


def _run(script: str, cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> str:
    proc = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode in ok, proc.stdout + proc.stderr
    return proc.stdout


def test_quickstart_reaches_a_watched_server(tmp_path: Path) -> None:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    host_block = _block(blocks, "sim.shell create")
    watch_block = _block(blocks, "export ASCEND_RT_VISIBLE_DEVICES")
    again_block = _block(blocks, "npu-smi set -t reset")
    look_block = _block(blocks, "ascend-doctor status")
    break_block = _block(blocks, "sim.shell inject")
    ack_block = _block(blocks, "incidents ack 2")
    demo_block = _block(blocks, "ascend-doctor demo --list")
    # the doc's directory and port, moved to this test's own
    work = tmp_path / "doctor-try"
    assert "~/doctor-try" in host_block and "--port 8000" in watch_block
    host_block = host_block.replace("~/doctor-try", str(work))
    port = free_port()
    watch_block = watch_block.replace("--port 8000", f"--port {port}")
    again_block = again_block.replace("--port 8000", f"--port {port}")
    look_block = look_block.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    # an installed doctor: the venv's bin first on PATH, as after `. .venv/bin/activate`
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for name in ("ASCEND_PROCESS_LOG_PATH", "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_SIM_STATE"):
        env.pop(name, None)
    assert _run("ascend-doctor --version", tmp_path, env).startswith("ascend-doctor, version")
    listed = _run(demo_block.splitlines()[0], tmp_path, env).strip().splitlines()
    words = {6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve"}
    assert f"names the {words[len(listed)]} fault scenarios" in DOC.read_text(encoding="utf-8")
    # one shell, as one terminal: steps 3 and 4; after Ctrl-C (here SIGTERM), step 7
    script = (
        f"set -e\n{host_block}\n{watch_block.rstrip()} > watch.out 2>&1 &\n"
        "echo $! > watch.pid\nwait $! || true\n"
        f"{again_block.rstrip()} > watch2.out 2>&1 &\n"
        "echo $! > watch2.pid\nwait $!\n"
    )
    # what the operator types at npu-smi's two reset questions (step 7)
    session = subprocess.Popen(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdin=subprocess.PIPE,
    )
    assert session.stdin is not None
    session.stdin.write(b"Y\ny\n")
    session.stdin.close()
    try:
        state = work / "state"

        def fixed() -> str | None:
            if not (state / "doctor.db").exists():
                return None
            out = _run(look_block.split("curl")[0], work, env)
            return out if "RUNNING" in out and "--max-model-len=15744" in out else None

        out = poll(fixed, 60, "the server RUNNING with the learned --max-model-len")
        assert "kv_cache_insufficient" in out and "lower_max_model_len" in out
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()
        assert models["data"][0]["max_model_len"] == 15744
        assert _run(look_block, work, env).count("15744") >= 3  # status, incidents, curl

        _run(break_block.split("\n")[0], work, env)  # the inject line

        def refused() -> str | None:
            out = _run(break_block.split("\n")[1], work, env)  # ascend-doctor incidents
            return (
                out if re.search(r"device_fault(?:.*\n)+?.*reset_device\s+refused", out) else None
            )

        out = poll(refused, 60, "the device fault's reset refused")
        assert "device resets are not allowed" in out

        # one fault, one incident: npu-smi's Critical joins the escalated heartbeat loss
        poll(lambda: _npu_smi_reported(state), 60, "npu-smi to report NPU 0")
        out = _run(break_block.split("\n")[1], work, env)
        assert len(re.findall(r"^#\d+ .*device_fault", out, re.M)) == 1, out
        status = _run(look_block.split("\n")[0], work, env, ok=(1,))
        assert "WAITING FOR A HUMAN: incident #2 escalated" in status, status
        assert "ascend-doctor incidents ack 2 --state-dir" in status
        watched = (work / "watch.out").read_text()
        assert f"state dir {work / 'state'}" in watched  # absolute, pasteable anywhere
        assert '"GET /health HTTP/1.1" 200' not in watched  # the doctor's own probes
        assert '"GET /health HTTP/1.1" 200' in (state / "server.log").read_text()

        # step 7: stop the doctor; the same shell repairs the card and starts it again
        first = int((work / "watch.pid").read_text())
        os.kill(first, signal.SIGTERM)
        poll(lambda: not _alive(first), 30, "the first doctor to exit")
        poll(lambda: (work / "watch2.pid").exists(), 30, "the doctor started again")

        def relaunched() -> str | None:
            # ascend-doctor status: 3 until the new doctor announced itself, then 1 while the
            # device incident waits for a human
            out = _run(look_block.split("\n")[0], work, env, ok=(1, 3))
            running = re.search(r"RUNNING \(pid (\d+)\)", out)
            return out if running and "--max-model-len 15744" in out else None

        out = poll(relaunched, 60, "the server started again with what was learned")
        assert "override --max-model-len=15744 (learned from incident #1)" in out
        started = (work / "watch2.out").read_text()
        assert "STARTING -> RUNNING" in started and "BACKOFF" not in started
        assert "WAITING FOR A HUMAN: incident #2" in out  # still: nobody acknowledged it

        # the second terminal acknowledges it and forgets what was learned: all is well
        done = _run(ack_block, work, env)
        assert "incident #2 acknowledged" in done and "cleared 1 override" in done
        out = _run(look_block.split("\n")[0], work, env)  # exit 0
        assert "WAITING" not in out and out.startswith("doctor: running")
    finally:
        os.killpg(session.pid, signal.SIGTERM)  # the doctor stops its server on SIGTERM
        session.wait(timeout=30)
        for name in ("watch.pid", "watch2.pid"):
            if (work / name).exists():
                doctor = int((work / name).read_text())
                poll(lambda: not _alive(doctor), 30, "the doctor to exit")  # noqa: B023
    assert "doctor shutting down" in (work / "watch2.out").read_text()


def _npu_smi_reported(state: Path) -> bool:
    from ascend_doctor.core.store import Store

    store = Store.in_dir(state, readonly=True)
    try:
        return any(f.finding.rule == "npu-smi-health-not-ok" for f in store.findings())
    finally:
        store.close()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
