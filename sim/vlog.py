"""Output of the fake server's processes: vLLM stdout lines, CANN plogs, the host kernel log.

Each process writes its own lines. vLLM's ``decorate_logs`` prefixes every line a process writes
with ``(Name pid=N) `` (coloured ``ESC[1;36m`` in 0.11 always, later only on a terminal), and
its ``NewLineFormatter`` repeats the record header after ``\\r\\n`` on each further line of a
multi-line record (vllm/utils ``_add_prefix``, vllm/logging_utils/formatter.py). Plog lines follow
the CANN format ``[LEVEL] MODULE(PID,PNAME):yyyy-mm-dd-hh:mm:ss.mmm.uuu [file.cc:LINE]TID Text``,
one file per process that uses the NPU, created at its first line. Everything is written with
one ``write`` per record because the doctor tails all of it live.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime
from pathlib import Path

API = "APIServer"

_CYAN, _RESET = "\033[1;36m", "\033[0;0m"


class VllmOut:
    """Writes one process's vLLM-style lines to its stdout (fd 1) from any thread."""

    def __init__(self, proc: str, pid: int, *, colored: bool = False, fd: int = 1) -> None:
        self.proc, self.pid, self.fd = proc, pid, fd
        tag = f"({proc} pid={pid})"
        self.prefix = f"{_CYAN}{tag}{_RESET} " if colored else f"{tag} "
        self._lock = threading.Lock()

    def log(self, level: str, where: str, message: str) -> None:
        """One logger record; further lines repeat the header after ``\\r\\n``."""
        stamp = datetime.now().strftime("%m-%d %H:%M:%S")
        header = f"{level} {stamp} [{where}] "
        body = message.replace("\n", "\r\n" + header)
        self._write(header + body + "\n")

    def raw(self, text: str) -> None:
        """Unformatted output (an uncaught traceback, uvicorn's own lines)."""
        self._write(text if text.endswith("\n") else text + "\n")

    def _write(self, text: str) -> None:
        # decorate_logs puts the prefix after every newline the process writes.
        lines = text.split("\n")
        out = "".join(self.prefix + ln + "\n" for ln in lines[:-1])
        with self._lock:
            try:
                os.write(self.fd, out.encode())
            except (BrokenPipeError, OSError):
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
    """The plog file of one process and its device log files, created at the first line."""

    def __init__(self, root: Path, pid: int, devices: list[int]) -> None:
        self.pid = pid
        self.tid = pid + 8  # torch_npu's runtime thread, a few ids above the main one
        stamp = _file_stamp()
        self.path = root / "debug" / "plog" / f"plog-{pid}_{stamp}.log"
        self.device_paths = {
            d: root / "debug" / f"device-{d}" / f"device-{pid}_{stamp}.log" for d in devices
        }
        self._lock = threading.Lock()

    def line(self, level: str, module: str, where: str, text: str, tid: int | None = None) -> str:
        """Format one CANN log line (without newline)."""
        t = self.tid if tid is None else tid
        return f"[{level}] {module}({self.pid},python3):{plog_stamp()} [{where}]{t} {text}"

    def write(self, level: str, module: str, where: str, text: str) -> None:
        """Append a standard-format line to the plog."""
        self._append(self.path, self.line(level, module, where, text))

    def device(self, device: int, level: str, module: str, where: str, text: str) -> None:
        """Append a line to the device log of ``device`` (plog if it has none)."""
        path = self.device_paths.get(device, self.path)
        self._append(path, self.line(level, module, where, text))

    def _append(self, path: Path, line: str) -> None:
        with self._lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")


def kernel_log(path: Path, text: str) -> None:
    """Append a host kernel line as syslog writes it to ``/var/log/messages``."""
    uptime = time.monotonic()
    stamp = datetime.now().strftime("%b %e %H:%M:%S")
    line = f"{stamp} localhost kernel: [{uptime:12.6f}] {text}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(line)
