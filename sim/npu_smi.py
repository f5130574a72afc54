"""The fake ``npu-smi`` binary, run through the shim that SimHost puts on PATH.

It reads and edits the host's state file, so a reset, a fault or a process
started by the fake server are seen by every later call. Every invocation is
appended to the host's npu-smi log so tests can check what the doctor ran.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from ascend_doctor.sim.npu_smi_format import (
    USAGE,
    render_board,
    render_health,
    render_info,
    render_usages,
)
from ascend_doctor.sim.state import (
    find_device,
    prune_dead,
    read_state,
    state_path_from_env,
    update_state,
)

_GARBAGE = """\
\x1b[?25l##npu-smi##  ?? 0xDEADBEEF  ########
|||| NPU <NULL> | ~~~~ | dev_id=-1 bus=ff:ff.f  ????
+====+====+
 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
"""

RC_OK, RC_FAIL, RC_USAGE = 0, 1, 2


def _log_call(state: dict[str, Any], argv: list[str], rc: int, **extra: object) -> None:
    log = state.get("npu_smi_log")
    if not log:
        return
    record = {"argv": argv, "rc": rc, "at": time.time(), **extra}
    # One write of one line to an O_APPEND file: concurrent calls do not interleave.
    with Path(log).open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _options(args: list[str]) -> dict[str, str] | None:
    """Parse ``-t X -i N -c C`` pairs; None on anything malformed."""
    opts: dict[str, str] = {}
    if len(args) % 2:
        return None
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag not in ("-t", "-i", "-c") or flag in opts:
            return None
        opts[flag] = value
    return opts


def _device_or_error(state: dict[str, Any], opts: dict[str, str]) -> dict[str, Any] | None:
    raw = opts.get("-i")
    chip = opts.get("-c", "0")
    dev = find_device(state, int(raw)) if raw is not None and raw.isdigit() else None
    if dev is None or chip != "0":
        print(
            f"The npu id or chip id is invalid (npu id: {raw}, chip id: {chip}). ret is -8001",
            file=sys.stderr,
        )
    return dev if chip == "0" else None


def _info(path: Path, opts: dict[str, str]) -> int:
    # Pruning writes the state back so a SIGKILLed server stops holding its card.
    with update_state(path) as state:
        prune_dead(state)
    kind = opts.get("-t")
    if kind is None:
        if opts:
            sys.stderr.write(USAGE)
            return RC_USAGE
        sys.stdout.write(render_info(state))
        return RC_OK
    if kind not in ("health", "usages", "board") or "-i" not in opts:
        sys.stderr.write(USAGE)
        return RC_USAGE
    dev = _device_or_error(state, opts)
    if dev is None:
        return RC_FAIL
    if kind == "health":
        sys.stdout.write(render_health(dev))
    elif kind == "usages":
        sys.stdout.write(render_usages(dev, state["processes"]))
    else:
        sys.stdout.write(render_board(dev))
    return RC_OK


def _reset(path: Path, opts: dict[str, str]) -> int:
    if opts.get("-t") != "reset" or "-i" not in opts:
        sys.stderr.write(USAGE)
        return RC_USAGE
    with update_state(path) as state:
        prune_dead(state)
        dev = _device_or_error(state, opts)
        if dev is None:
            return RC_FAIL
        holders = [p for p in state["processes"] if p["device"] == dev["id"]]
        reset_seconds = float(state.get("reset_seconds", 1.0))
    if holders:
        pids = ", ".join(str(p["pid"]) for p in holders)
        print(
            f"Failed to reset npu {dev['id']} chip 0 because the device is used "
            f"(process id: {pids}). ret is -8020"
        )
        return RC_FAIL
    # The lock is not held while the "hardware" resets: other calls keep working.
    time.sleep(reset_seconds)
    with update_state(path) as state:
        dev = find_device(state, dev["id"])
        assert dev is not None
        dev.update(health="OK", fault=None, error_code="NA", error_info="NA")
    print(f"Reset npu {dev['id']} chip 0 successfully.")
    return RC_OK


def run(argv: list[str], path: Path) -> int:
    """Execute one npu-smi command line against the state at ``path``; return its status."""
    if not argv:
        sys.stderr.write(USAGE)
        return RC_USAGE
    opts = _options(argv[1:])
    if opts is None:
        sys.stderr.write(USAGE)
        return RC_USAGE
    if argv[0] == "info":
        return _info(path, opts)
    if argv[0] == "set":
        return _reset(path, opts)
    sys.stderr.write(USAGE)
    return RC_USAGE


def main(argv: list[str] | None = None) -> int:
    """Entry point of the shim: honour the failure mode, run, log the call."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = state_path_from_env()
    state = read_state(path)
    mode = state.get("npu_smi_mode", "normal")
    if mode == "hang":
        # Logged up front: a hung call only ends by SIGKILL, which is what rc -9 records.
        _log_call(state, args, -9, hang=True)
        while True:
            time.sleep(3600)
    if mode == "garbage":
        sys.stdout.write(_GARBAGE)
        sys.stdout.flush()
        _log_call(state, args, RC_OK, garbage=True)
        return RC_OK
    try:
        rc = run(args, path)
    finally:
        sys.stdout.flush()
    _log_call(read_state(path), args, rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
