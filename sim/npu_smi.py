"""The fake ``npu-smi`` binary, run through the shim that SimHost puts on PATH.

It reads and edits the host's state file, so a reset, a fault or a process started by the fake
server are seen by every later call. Every invocation is appended to the host's npu-smi log so
tests can check what the doctor ran. Wording, prompts and exit statuses follow the npu-smi
source (Ascend driver repository, ``src/custom/dev_prod/user/npucli``): ``main`` exits with the
negative ``NPU_ERR_CODE_*`` it got, which the shell sees modulo 256; a reset asks
``Are you sure you want to continue resetting?(Y/N)`` and reads one word from stdin (EOF or
anything but ``Y``/``y`` aborts); on an Atlas 800T A2 whose NPUs are joined by HCCS a reset
takes every NPU of the board and asks a second time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from ascend_doctor.sim.npu_smi_format import (
    HELP,
    USAGE,
    render_board,
    render_ecc,
    render_health,
    render_info,
    render_usages,
)
from ascend_doctor.sim.state import (
    find_device,
    grown,
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

# npucli/inc/npu_smi.h: NPU_ERR_CODE_BASE is -9000; main() exits with the code itself.
NPU_OK = 0
INVALID_PARAMETER = -9001
INNER_ERR = -9005
ABORT_OPERATE = -9016
RESOURCE_OCCUPIED = -9020


def exit_status(code: int) -> int:
    """What the shell sees of ``exit(code)``."""
    return code & 0xFF


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
        if flag not in ("-t", "-i", "-c", "-m") or flag in opts:
            return None
        opts[flag] = value
    return opts


def _device(state: dict[str, Any], opts: dict[str, str]) -> dict[str, Any] | None:
    """The card ``-i`` names; prints npu-smi's complaint when there is none."""
    raw = opts.get("-i", "")
    dev = find_device(state, int(raw)) if raw.isdigit() else None
    if dev is None:
        sys.stdout.write(f"Invalid card id.\nError parameter of -i\n{USAGE}")
        return None
    if opts.get("-c", "0") != "0":
        sys.stdout.write(f"Invalid chip id.\nError parameter of -c\n{USAGE}")
        return None
    return dev


def _info(path: Path, opts: dict[str, str]) -> int:
    # Pruning writes the state back so a SIGKILLed server stops holding its card.
    with update_state(path) as state:
        prune_dead(state)
    state = {**state, "processes": grown(state)}
    kind = opts.get("-t")
    if kind is None:
        if opts:
            sys.stdout.write(USAGE)
            return INVALID_PARAMETER
        sys.stdout.write(render_info(state))
        return NPU_OK
    if kind not in ("health", "usages", "board", "ecc") or "-i" not in opts:
        sys.stdout.write(USAGE)
        return INVALID_PARAMETER
    dev = _device(state, opts)
    if dev is None:
        return INVALID_PARAMETER
    if kind == "health":
        sys.stdout.write(render_health(dev))
    elif kind == "usages":
        sys.stdout.write(render_usages(dev, state["processes"]))
    elif kind == "ecc":
        sys.stdout.write(render_ecc(dev))
    else:
        sys.stdout.write(render_board(dev, chip="-c" in opts))
    return NPU_OK


def _word() -> str | None:
    """One whitespace-delimited word from stdin (``scanf("%s")``); None at EOF."""
    word = ""
    while True:
        ch = sys.stdin.read(1)
        if not ch:
            return word or None
        if ch.isspace():
            if word:
                return word
            continue
        word += ch


def _result(code: int) -> int:
    # print_reset_result() for a server board (SERVER_SET, in-band).
    status = "OK" if code == NPU_OK else "Fail"
    if code == NPU_OK:
        message = "Reset server successfully."
    elif code == ABORT_OPERATE:
        message = "User aborts reset server by inband."
    else:
        message = "Failed to reset server"
    sys.stdout.write(f"\t{'Status':<30} : {status}\n\t{'Message':<30} : {message}\n")
    return code


def _confirm_board() -> int:
    """check_confirm_info(): y/n, anything else asks again, EOF is an inner error."""
    sys.stdout.write(
        "It's AMP mode, but hccs is on, it will reboot all devices, do you want to continue "
        "reboot? [y/n]\n"
    )
    sys.stdout.flush()
    while (word := _word()) is not None:
        if word in ("y", "Y"):
            return NPU_OK
        if word in ("n", "N"):
            return ABORT_OPERATE
        sys.stdout.write("Error! Please input 'y' or 'n'!\n")
        sys.stdout.flush()
    return INNER_ERR


def _reset(path: Path, opts: dict[str, str]) -> int:
    if opts.get("-t") != "reset" or "-i" not in opts:
        sys.stdout.write(USAGE)
        return INVALID_PARAMETER
    state = read_state(path)
    dev = _device(state, opts)
    if dev is None:
        return INVALID_PARAMETER
    board = state.get("reset_scope", "board") == "board"
    sys.stdout.write(
        "Resetting the standard PCIe card or NPU chip may cause a system hang or abnormal "
        "reset during service running.\nAre you sure you want to continue resetting?(Y/N)\n"
    )
    sys.stdout.flush()
    if _word() not in ("Y", "y"):
        return _result(ABORT_OPERATE)
    if board:
        rc = _confirm_board()
        if rc != NPU_OK:
            return _result(rc)
        sys.stdout.write(f"\t{'Message':<30} : resetting (about 150 seconds) ...\n")
    else:
        sys.stdout.write(f"\t{'Message':<30} : resetting ...\n")
    sys.stdout.flush()
    with update_state(path) as state:
        prune_dead(state)
        ids = [d["id"] for d in state["devices"]] if board else [dev["id"]]
        busy = [p for p in state["processes"] if p["device"] in ids]
        reset_seconds = float(state.get("reset_seconds", 1.0))
    if busy:
        # The driver refuses a hot reset while any process holds a card it would reset.
        return _result(RESOURCE_OCCUPIED)
    # The lock is not held while the "hardware" resets: other calls keep working.
    time.sleep(reset_seconds)
    with update_state(path) as state:
        for n in ids:
            d = find_device(state, n)
            if d is not None:
                d.update(health="OK", fault=None, error_code="NA", error_info="NA")
        state["resets"] = [*state.get("resets", []), {"devices": ids, "at": time.time()}]
    return _result(NPU_OK)


def run(argv: list[str], path: Path) -> int:
    """Execute one npu-smi command line against the state at ``path``; the npu-smi code."""
    if not argv or argv[0] not in ("info", "set", "-h", "--help"):
        if argv:
            sys.stdout.write("Command or option is not found.\n")
        sys.stdout.write(HELP)
        return INVALID_PARAMETER if not argv else INNER_ERR
    if argv[0] in ("-h", "--help"):
        sys.stdout.write(HELP)
        return NPU_OK
    opts = _options(argv[1:])
    if opts is None:
        sys.stdout.write(USAGE)
        return INVALID_PARAMETER
    if argv[0] == "info":
        return _info(path, opts)
    return _reset(path, opts)


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
        _log_call(state, args, 0, garbage=True)
        return 0
    try:
        code = run(args, path)
    finally:
        sys.stdout.flush()
    rc = exit_status(code)
    _log_call(read_state(path), args, rc, code=code)
    return rc


if __name__ == "__main__":
    sys.exit(main())
