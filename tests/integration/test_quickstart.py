"""docs/quickstart.md, followed literally from start to end: every ```sh block the doc shows,
in the doc's order (``STEPS``: a block the doc gains fails here until this test follows it),
run in bash as the doc says, with the doc's own expected outcomes asserted.

What is not run, and why:
- step 1's ``git clone`` and ``python3 -m venv ... && pip install -e .``: this test runs inside
  that checkout and venv (.ci/run makes them with the same commands); CI has no network to
  clone from, and a second install would take minutes. Its ``ascend-doctor --version`` runs.
- step 2's ``ascend-doctor demo`` runs until its first scenario's ``result:`` and is then
  interrupted with Ctrl-C, as the doc says one may: the whole tour takes minutes, and each of
  its scenarios' outcomes is tests/integration/test_scenarios.py's subject.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ascend_doctor.cli.demo import TOUR, free_port
from tests.conftest import poll

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"

STEPS = (
    "ascend-doctor --version",  # 1. Install
    "ascend-doctor demo --list",  # 2. Watch the demo
    "sim.shell create",  # 3. Put a simulated host in your shell
    "export ASCEND_RT_VISIBLE_DEVICES",  # 4. Start a server under the doctor
    "ascend-doctor status",  # 5. Look at what it did
    "sim.shell inject",  # 6. Break a card
    "npu-smi set -t reset",  # 7. Repair, and start again
    "incidents ack 2",  # 7. ... acknowledge, forget what was learned
)
"""A line of each ```sh block of the doc, in the doc's order."""


def _blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


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


def _env() -> dict[str, str]:
    """An installed doctor: the venv's bin first on PATH, as after ``. .venv/bin/activate``."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for name in ("ASCEND_PROCESS_LOG_PATH", "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_SIM_STATE"):
        env.pop(name, None)
    return env


def test_every_block_of_the_quickstart_is_followed_in_order() -> None:
    blocks = _blocks()
    followed = [[n for n in STEPS if n in b] for b in blocks]
    assert followed == [[n] for n in STEPS], "docs/quickstart.md's blocks changed: follow them"


def test_steps_1_and_2_install_and_watch_the_demo(tmp_path: Path) -> None:
    blocks = _blocks()
    install, demo = _block(blocks, STEPS[0]), _block(blocks, STEPS[1])
    env = {**_env(), "TMPDIR": str(tmp_path)}  # the demo's own state dir lands here
    assert install.splitlines()[0].startswith("git clone")  # not run: see the module
    assert install.splitlines()[1].startswith("python3 -m venv")
    assert _run(install.splitlines()[2], tmp_path, env).startswith("ascend-doctor, version")

    listing, tour = demo.splitlines()
    listed = [ln.split()[0] for ln in _run(listing, tmp_path, env).splitlines() if ln.strip()]
    text = DOC.read_text(encoding="utf-8")
    words = {9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen"}
    assert f"names the {words[len(listed)]} fault scenarios" in text
    said = text[text.index("names the ") : text.index("Each prints a timeline")]
    named = [n for n in re.findall(r"`([a-z-]+)`", said) if n in listed]
    assert sorted(named) == sorted(listed), "the doc names every scenario of the tour"
    assert named == list(TOUR), "in the order the demo runs them"

    log = tmp_path / "demo.out"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(["bash", "-c", f"exec {tour}"], cwd=tmp_path, env=env,
                                stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        poll(lambda: "result:" in log.read_text(), 120, "the first scenario's result")
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = log.read_text()
    first = re.search(r"^== ([a-z-]+):", out, re.M)
    assert first is not None and first.group(1) == named[0], out  # the tour's order is the doc's
    assert "--max-model-len 32768 → 15744" in out and "result: recovered" in out
    assert re.search(r"interrupted after [12] of 11 scenarios", out), out
    state = Path(out.split("\nstate dir: ")[-1].splitlines()[0])
    assert state.is_relative_to(tmp_path) and (state / "simhost").is_dir()  # kept inside it
    assert out.rstrip().endswith(f"see: ascend-doctor incidents --state-dir {state}")
    recorded = _run(f"ascend-doctor incidents --state-dir {state}", tmp_path, env)
    assert re.search(r"^#1 resolved\s.*kv_cache_insufficient", recorded, re.M), recorded
    shutil.rmtree(state.parent, ignore_errors=True)


def test_steps_3_to_7_a_watched_server_fixed_then_a_broken_card(tmp_path: Path) -> None:
    blocks = _blocks()
    host_block = _block(blocks, "sim.shell create")
    watch_block = _block(blocks, "export ASCEND_RT_VISIBLE_DEVICES")
    again_block = _block(blocks, "npu-smi set -t reset")
    look_block = _block(blocks, "ascend-doctor status")
    break_block = _block(blocks, "sim.shell inject")
    ack_block = _block(blocks, "incidents ack 2")
    # the doc's directory and port, moved to this test's own
    work = tmp_path / "doctor-try"
    assert "~/doctor-try" in host_block and "--port 8000" in watch_block
    host_block = host_block.replace("~/doctor-try", str(work))
    port = free_port()
    watch_block = watch_block.replace("--port 8000", f"--port {port}")
    again_block = again_block.replace("--port 8000", f"--port {port}")
    look_block = look_block.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    env = _env()
    # one shell, as one terminal: steps 3 and 4; after Ctrl-C (here SIGTERM), step 7
    script = (
        f"set -e\n{host_block}\n{watch_block.rstrip()} > watch.out 2>&1 &\n"
        "echo $! > watch.pid\nwait $! || true\n"
        f"{again_block.rstrip()} > watch2.out 2>&1 &\n"
        "echo $! > watch2.pid\nwait $!\n"
    )
    # what the operator types at npu-smi's two reset questions (step 7)
    terminal = tmp_path / "terminal.out"  # what the first terminal shows besides the doctor
    with open(terminal, "wb") as screen:
        session = subprocess.Popen(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            start_new_session=True,
            stdin=subprocess.PIPE,
            stdout=screen,
            stderr=subprocess.STDOUT,
        )
    assert session.stdin is not None
    session.stdin.write(b"Y\ny\n")
    session.stdin.close()
    try:
        state = work / "state"
        # step 3: npu-smi info prints a real card's table: eight healthy 910B3 cards
        poll(lambda: "Process memory(MB)" in terminal.read_text(), 30, "npu-smi info's table")
        table = terminal.read_text()
        assert len(re.findall(r"^\| \d +910B3 +\| OK ", table, re.M)) == 8, table

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

        def resolved() -> str | None:  # after 30 quiet seconds (remediation.settle_seconds)
            out = _run(look_block.split("\n")[1], work, env)  # ascend-doctor incidents
            return out if re.search(r"^#1 resolved .*kv_cache_insufficient", out, re.M) else None

        out = poll(resolved, 90, "incident #1 resolved")
        assert re.search(r"lower_max_model_len\s+ok", out) and "opened " in out

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
        assert re.search(r"STOPPED.*staying stopped", status), status
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
        # npu-smi asked twice, the board was reset, the card is healthy again
        said = terminal.read_text()
        assert "Are you sure you want to continue resetting?(Y/N)" in said
        assert "It's AMP mode, but hccs is on, it will reboot all devices" in said
        assert "Reset server successfully." in said
        assert re.search(r"Health Status\s+: OK", said.split("Reset server successfully.")[1])

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
