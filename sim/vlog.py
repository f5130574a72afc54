"""Output of the fake server: vLLM stdout lines and CANN plog/device log files.

vLLM prefixes every line (also each line of a traceback) with the process tag,
level, a year-less timestamp and ``[file.py:LINE]``; plog lines follow the CANN
format ``[LEVEL] MODULE(PID,PNAME):yyyy-mm-dd-hh:mm:ss.mmm.uuu [file.cc:LINE]TID Text``.
Everything is flushed per line because the doctor tails both live.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import TextIO

API = "APIServer"
ENGINE = "EngineCore_DP0"


class VllmOut:
    """Writes vLLM-style lines to stdout from any thread."""

    def __init__(self, pid: int, stream: TextIO | None = None) -> None:
        self.pid = pid
        self._stream = stream if stream is not None else sys.stdout
        self._lock = threading.Lock()

    def log(self, proc: str, level: str, where: str, message: str) -> None:
        """One logger record; a multi-line message repeats the prefix on each line."""
        stamp = datetime.now().strftime("%m-%d %H:%M:%S")
        prefix = f"({proc} pid={self.pid}) {level} {stamp} [{where}] "
        self._write("".join(prefix + line + "\n" for line in message.split("\n")))

    def raw(self, proc: str, text: str) -> None:
        """Unformatted output of a process (an uncaught traceback), tagged per line."""
        self._write("".join(f"({proc} pid={self.pid}) {line}\n" for line in text.split("\n")))

    def _write(self, text: str) -> None:
        with self._lock:
            try:
                self._stream.write(text)
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                # The reader went away (supervisor killed); nothing left to tell.
                pass


def log_root_from_env() -> Path:
    """CANN's log root: ASCEND_PROCESS_LOG_PATH, else ASCEND_WORK_PATH, else ~/ascend/log."""
    for var in ("ASCEND_PROCESS_LOG_PATH", "ASCEND_WORK_PATH"):
        value = os.environ.get(var)
        if value:
            return Path(value)
    return Path.home() / "ascend" / "log"


def plog_stamp(now: float | None = None) -> str:
    """``yyyy-mm-dd-hh:mm:ss.mmm.uuu`` as in plog lines."""
    t = time.time() if now is None else now
    dt = datetime.fromtimestamp(t)
    return f"{dt:%Y-%m-%d-%H:%M:%S}.{dt.microsecond // 1000:03d}.{dt.microsecond % 1000:03d}"


def _file_stamp() -> str:
    dt = datetime.now()
    return f"{dt:%Y%m%d%H%M%S}{dt.microsecond // 1000:03d}"


class Plog:
    """The plog file of this process and its device log files."""

    def __init__(self, root: Path, pid: int, devices: list[int]) -> None:
        self.pid = pid
        self.tid = pid + 8  # torch_npu's runtime thread, a few ids above the main one
        stamp = _file_stamp()
        self.path = root / "debug" / "plog" / f"plog-{pid}_{stamp}.log"
        self.device_paths = {
            d: root / "debug" / f"device-{d}" / f"device-{pid}_{stamp}.log" for d in devices
        }
        self._lock = threading.Lock()
        for p in (self.path, *self.device_paths.values()):
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch()

    def line(self, level: str, module: str, where: str, text: str, tid: int | None = None) -> str:
        """Format one CANN log line (without newline)."""
        t = self.tid if tid is None else tid
        return f"[{level}] {module}({self.pid},python3):{plog_stamp()} [{where}]{t} {text}"

    def write(self, level: str, module: str, where: str, text: str) -> None:
        """Append a standard-format line to the plog."""
        self._append(self.path, self.line(level, module, where, text))

    def drv(self, level: str, submodule: str, func: str, text: str) -> None:
        """Append a driver line: ``[ascend][curpid: P, T][drv][sub][func line] text``."""
        line = (
            f"[{level}] DRV({self.pid},python3):{plog_stamp()} "
            f"[ascend][curpid: {self.pid}, {self.tid}][drv][{submodule}][{func}] {text}"
        )
        self._append(self.path, line)

    def device(self, device: int, level: str, module: str, where: str, text: str) -> None:
        """Append a line to the device log of ``device`` (plog if it has none)."""
        path = self.device_paths.get(device, self.path)
        self._append(path, self.line(level, module, where, text))

    def _append(self, path: Path, line: str) -> None:
        with self._lock, path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
