"""Issue 15, point 4: a secret that reaches an exception never reaches the doctor's own log:
not in a logged traceback's message or source lines, not in an exception nobody caught (main
thread or another thread), not in asyncio's "exception was never retrieved". A real process
sets up the doctor's logging as ``watch`` does and fails in each way."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

KEY, TOKEN, LITERAL = "sk-tb-3f81", "hf_TbToKeN", "sk-in-source-77"

SCRIPT = textwrap.dedent(
    f"""
    import asyncio, gc, logging, sys, threading
    from ascend_doctor.cli.common import setup_logging

    setup_logging(False, {{logfile!r}})
    log = logging.getLogger("ascend_doctor.test")
    argv = ["vllm", "serve", "/m", "--api-key", "{KEY}"]

    def launch():
        raise RuntimeError("cannot launch " + " ".join(argv) + " with HF_TOKEN={TOKEN}")

    try:
        launch()
    except RuntimeError:
        log.exception("the launch failed")

    def in_source():
        raise ValueError(f"failed"); flag = "--api-key={LITERAL}"  # a source line with a secret

    try:
        in_source()
    except ValueError:
        log.error("logged with its stack", exc_info=True, stack_info=True)

    t = threading.Thread(target=launch, name="worker")
    t.start(); t.join()

    async def lost():
        launch()

    async def main():
        asyncio.ensure_future(lost())
        await asyncio.sleep(0.05)

    asyncio.run(main())
    gc.collect()
    launch()  # nobody catches this one
    """
)


def test_no_secret_reaches_the_doctors_log_through_a_traceback(tmp_path: Path) -> None:
    logfile = tmp_path / "doctor.log"
    script = tmp_path / "fails.py"
    script.write_text(SCRIPT.replace("{logfile!r}", repr(str(logfile))))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 1  # the uncaught exception still ends the process
    logged = logfile.read_text()
    everything = logged + out.stdout + out.stderr
    for secret in (KEY, TOKEN, LITERAL):
        assert secret not in everything, everything
    assert logged.count("Traceback (most recent call last)") >= 5, logged
    assert "--api-key <redacted>" in logged and "HF_TOKEN=<redacted>" in logged
    assert '--api-key=<redacted>"' in logged  # the source line of the second traceback
    assert "uncaught RuntimeError in thread worker" in logged
    assert "Task exception was never retrieved" in logged
    assert "CRITICAL ascend_doctor: uncaught RuntimeError" in logged
    assert "Stack (most recent call last)" in logged
