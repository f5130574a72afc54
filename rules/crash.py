"""An exit of the server that nothing explains is itself a failure (issue 14, section 4).

A server killed with SIGKILL (the kernel's OOM killer, ``kill -9``, a container's memory
limit) prints nothing: without this finding its end would be a restart and no incident. The
daemon makes one when the server exits as a crash and no known finding came within
:data:`CRASH_WINDOW` seconds before; a kernel OOM-killer line for one of its processes is
such a finding (rules/packs/host.yaml), and then the host's memory is the root cause instead.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

from ascend_doctor.core.events import (
    Category,
    Finding,
    LogLine,
    PlannedAction,
    ProcessEvent,
    Role,
    Severity,
)

RULE_ID = "server-exit-unexplained"
"""The rule id these findings carry."""
CRASH_WINDOW = 30.0
"""Seconds before an exit in which a known finding explains it."""
EXPLAIN = (
    "The server ended without a failure the doctor recognised. Killed by SIGKILL with no word "
    "of its own: the kernel's OOM killer (check `dmesg` / `journalctl -k` for 'Out of memory: "
    "Killed process'), an operator's kill -9 or a container runtime's memory limit. Killed by "
    "SIGSEGV, SIGBUS or SIGABRT: a crash in native code (torch_npu, CANN, a custom op); the "
    "evidence is the last lines it printed. The doctor restarts it once; a second unexplained "
    "crash goes to a human."
)


def how_it_ended(event: ProcessEvent) -> str:
    """``killed by SIGKILL``, ``exited with status 1`` or the state change's reason."""
    code = event.exit_code
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    if code is not None and code > 128 and code - 128 in signal.Signals._value2member_map_:
        # a shell or a container runtime between the doctor and the server reports 128 + N
        return f"exited with status {code} ({signal.Signals(code - 128).name})"
    if code is not None:
        return f"exited with status {code}"
    return event.reason or "went away"


def crash_finding(event: ProcessEvent, last_lines: Sequence[str], path: str = "") -> Finding:
    """The ``server_crashed`` finding of one unexplained exit, its last lines as evidence."""
    how = how_it_ended(event)
    pid = f" (pid {event.pid})" if event.pid else ""
    evidence = [LogLine(path, -1, line) for line in last_lines]
    return Finding(
        rule=RULE_ID,
        category=Category.SERVER_CRASHED,
        severity=Severity.ERROR,
        role=Role.ROOT,
        subject="server",
        summary=f"The server{pid} {how}, and nothing it or the kernel printed explains it",
        at=event.at,
        captures={"exit_code": "" if event.exit_code is None else str(event.exit_code)},
        evidence=(LogLine(path, -1, f"server {how}{pid}: {event.reason}"), *evidence),
        path=path,
        remediation=((PlannedAction("restart", {}),),),
        explain=EXPLAIN,
    )


__all__ = ["CRASH_WINDOW", "RULE_ID", "crash_finding", "how_it_ended"]
