"""The simulated host's shared state: one JSON file guarded by an fcntl lock file.

The fake ``npu-smi`` and the fake ``vllm serve`` run as separate processes and
touch the same device and process records concurrently, so every change goes
through :func:`update_state`: take the lock, read, mutate, write a temp file and
``os.replace`` it. Readers never see a half-written file, even without the lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STATE_ENV = "ASCEND_SIM_STATE"
HBM_TOTAL_MB = 65536
IDLE_HBM_MB = 3400
CHIP_NAME = "910B3"
DRIVER_VERSION = "24.1.rc2"
FIRMWARE_VERSION = "7.5.0.1.220"

# Bus-Ids of an Atlas 800T A2, in the order npu-smi lists them.
_BUS_IDS = (
    "0000:C1:00.0",
    "0000:01:00.0",
    "0000:C2:00.0",
    "0000:02:00.0",
    "0000:81:00.0",
    "0000:41:00.0",
    "0000:82:00.0",
    "0000:42:00.0",
)


def _bus_id(n: int) -> str:
    if n < len(_BUS_IDS):
        return _BUS_IDS[n]
    return f"0000:{0x90 + n:02X}:00.0"


def initial_state(
    devices: int,
    reset_seconds: float,
    load_seconds: float,
    npu_smi_log: Path,
    *,
    vllm_version: str = "0.11",
    kernel_log: Path | None = None,
) -> dict[str, Any]:
    """Return a fresh state: ``devices`` healthy idle 910B3 cards and no processes."""
    return {
        "devices": [
            {
                "id": n,
                "name": CHIP_NAME,
                "health": "OK",
                "fault": None,
                "error_code": "NA",
                "error_info": "NA",
                "bus_id": _bus_id(n),
                # Small per-card spread so the table looks like real hardware.
                "power": round(88.0 + (n * 1.7) % 6, 1),
                "temp": 36 + (n * 3) % 5,
                "idle_hbm_mb": IDLE_HBM_MB - 4 + (n * 5) % 9,
            }
            for n in range(devices)
        ],
        "processes": [],
        "quirks": {},
        "npu_smi_mode": "normal",
        "reset_seconds": reset_seconds,
        "load_seconds": load_seconds,
        "npu_smi_log": str(npu_smi_log),
        "vllm_version": vllm_version,
        "kernel_log": str(kernel_log) if kernel_log else None,
        # An 800T A2's eight NPUs are joined by HCCS: npu-smi resets them all at once.
        "reset_scope": "board",
        "driver_hang_seconds": 0.0,
        "profile_parse_seconds": 1.0,
    }


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def read_state(path: Path) -> dict[str, Any]:
    """Read the state file (no lock needed: writes are atomic replaces)."""
    with path.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Atomically replace the state file; callers hold the lock."""
    fd, tmp = tempfile.mkstemp(prefix=".npu.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def update_state(path: Path) -> Iterator[dict[str, Any]]:
    """Lock, yield the state for mutation, then write it back atomically."""
    with _lock_path(path).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = read_state(path)
            yield state
            write_state(path, state)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a running process (zombies count as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A SIGKILLed child stays a zombie until its parent reaps it; it no longer
    # holds the device, so the real driver would not list it either.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def prune_dead(state: dict[str, Any]) -> bool:
    """Drop process records whose pid is gone; return True if any were dropped.

    A record with ``held_until`` in the future stays: its process was stuck in the driver
    when it was killed, and the driver lets go of the card only when that call returns."""
    procs = state["processes"]
    now = time.time()
    live = [p for p in procs if pid_alive(int(p["pid"])) or float(p.get("held_until", 0)) > now]
    state["processes"] = live
    return len(live) != len(procs)


QUIRKS = {
    "graph_capture": ("fail",),
    "hang": ("once",),
    "aicore": ("always",),
    "stuck": ("once",),
    "garbled": ("exclamation", "empty"),
}
"""Host behaviours a scenario can switch on: ACL graph capture fails (an HDK without the
stream resources capture needs), the next request hangs the engine once, or every start dies
of an AI Core exception (a failure no remediation step fixes); the engine's busy loop sticks
once before it schedules the next request, with nothing running (vllm-project/vllm#17972);
completions turn to ``!!!!`` or nothing (vllm-project/vllm-ascend#445, #6980)."""


GROWTH_KEY = "hbm_growth_mb_per_s"
"""Host setting: how fast a serving process's HBM grows once it holds its card (0: not)."""


def grown(state: dict[str, Any], now: float | None = None) -> list[dict[str, Any]]:
    """The process records with each server process's memory grown at the host's fixed rate
    since it took its card: memory outside vLLM's pool that a leak keeps (vllm-project/
    vllm-ascend#5262: "climbs steadily ... not reclaimed over time and ultimately triggers an
    Out-of-Memory crash"). Foreign holders (no ``since``) do not grow."""
    rate = float(state.get(GROWTH_KEY) or 0.0)
    now = time.time() if now is None else now
    out = []
    for p in state["processes"]:
        if rate > 0 and "since" in p:
            p = {**p, "memory_mb": int(p["memory_mb"] + rate * max(0.0, now - float(p["since"])))}
        out.append(p)
    return out


def take_quirk(path: Path, name: str) -> str | None:
    """The value of quirk ``name``; a ``once`` quirk is consumed by the caller that sees it."""
    with update_state(path) as state:
        quirks: dict[str, str] = state.setdefault("quirks", {})
        value = quirks.get(name)
        if value == "once":
            del quirks[name]
    return value


def find_device(state: dict[str, Any], n: int) -> dict[str, Any] | None:
    """Return the record of device ``n`` or None when the host has no such card."""
    devices: list[dict[str, Any]] = state["devices"]
    for dev in devices:
        if dev["id"] == n:
            return dev
    return None


def state_path_from_env(default: Path | None = None) -> Path:
    """Locate the state file via ASCEND_SIM_STATE, else ``default``."""
    value = os.environ.get(STATE_ENV)
    if value:
        return Path(value)
    if default is None:
        raise FileNotFoundError(f"{STATE_ENV} is not set and no state path was given")
    return default
