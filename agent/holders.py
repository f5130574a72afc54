"""Whose process holds an NPU: the watched server's own process tree, or someone else's.

vLLM runs the API server, its engine core and (with tensor parallelism) one worker process per
card; the process npu-smi lists on a card is the engine core or a worker, never the API server.
The supervisor starts the server as the leader of its own process group, and vLLM's children
stay in that group, so a holder is the server's own when its group is, or when one of its
ancestors is a pid the server had. A child whose API server already died (an engine core stuck
in the driver after its card lost its heartbeat) is found by its group.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

import psutil


def alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def is_own(pid: int, own: Iterable[int]) -> bool:
    """Whether ``pid`` belongs to the server whose processes have had the pids ``own``."""
    mine = set(own)
    if pid in mine:
        return True
    with contextlib.suppress(OSError):
        if os.getpgid(pid) in mine:
            return True
    try:
        return any(parent.pid in mine for parent in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def descendants(pid: int) -> list[int]:
    """The live descendants of ``pid`` (the engine core and workers of an API server)."""
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def npu_process(pid: int) -> int:
    """The process of server ``pid`` that runs on the NPU (what msprof attaches to): its first
    ``VLLM::Worker*`` child, else its ``VLLM::EngineCore`` (one rank runs in the engine core),
    else ``pid`` itself (a release that names no process)."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return pid
    titles: list[tuple[str, int]] = []
    for kid in kids:
        with contextlib.suppress(psutil.Error):
            titles.append(((kid.cmdline() or [""])[0], kid.pid))
    for prefix in ("VLLM::Worker", "VLLM::EngineCore"):
        for title, kid_pid in sorted(titles):
            if title.startswith(prefix):
                return kid_pid
    return pid


__all__ = ["alive", "descendants", "is_own", "npu_process"]
