"""Offline scans of big files on every core, with the findings of one process.

A file is cut exactly where one process reading it would cut it (``read_chunks``: whole
lines, a read of ``block`` bytes at a time), so every chunk, and with it every block across a
cut, quiet window and context line, is what it would be in one process. Worker processes
count each chunk's newlines into shared memory (the chunks after it start their line numbers
from them), then scan it; the findings come back in file order. The one state an engine
carries from chunk to chunk, the templates of unrecognised errors (drain3 learns them in
order), is mined here, in order, so template ids and summaries are those of one process too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import mmap
import multiprocessing
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from ascend_doctor.core.events import Finding, LogChunk
from ascend_doctor.rules import Engine
from ascend_doctor.rules.infer import is_inferred, summary_of
from ascend_doctor.rules.lines import newline_marks

T = TypeVar("T")
UNRECOGNISED = "unrecognised"

BLOCK = 4 << 20
"""What an offline scan reads at a time (``read_chunks``' block) at most: a chunk's size."""
SHARES = 4
"""A regular file of more than one chunk is cut into a multiple of this many chunks."""


def block_for(size: int) -> int:
    """The block an offline scan reads a regular file of ``size`` bytes with: at most
    ``BLOCK``, cutting the file into chunks of about one size, a multiple of ``SHARES`` of
    them, so that 1, 2 or 4 workers get even shares (a 6 MB log cut at 4 MiB gave one
    worker two thirds of the work). It depends on the size alone: one process and any
    number of workers cut a file in the same places."""
    if size <= BLOCK:
        return BLOCK
    n = -(-size // BLOCK)
    n += -n % SHARES
    return -(-size // n)


def block_of(stream: Any) -> int:
    """The block to read ``stream`` with: :func:`block_for` its size when it is a regular
    file, else ``BLOCK`` (a pipe, a FIFO, a tar member)."""
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return BLOCK
    return block_for(st.st_size) if stat.S_ISREG(st.st_mode) else BLOCK


@dataclass(frozen=True, slots=True)
class Piece:
    """One chunk of a file as one process would read it."""

    offset: int
    """Byte offset of the chunk in the file."""
    length: int
    """Its length in the file (the last chunk gets a newline added when it has none)."""


def regular_pieces(stream: Any, *, already_read: int = 0, block: int | None = None) -> list[Piece]:
    """The chunks of an open regular file (see :func:`pieces`); [] for a pipe, a FIFO, a
    tar member or a file that fits in one read: those are read as a stream."""
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return []
    block = block_for(st.st_size) if block is None else block
    if not stat.S_ISREG(st.st_mode) or st.st_size <= already_read + block:
        return []
    return pieces(stream.fileno(), already_read=already_read, block=block)


def pieces(fd: int, *, already_read: int = 0, block: int = BLOCK) -> list[Piece]:
    """The chunks ``read_chunks`` yields for the regular file open as ``fd`` when the caller
    read ``already_read`` bytes first: it cuts after the last newline of what it has read."""
    size = os.fstat(fd).st_size
    if size == 0:
        return []
    with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
        out: list[Piece] = []
        start, read_to = 0, min(already_read, size)
        while True:
            nxt = min(read_to + block, size)
            if nxt == read_to:  # end of file: what is left is the last chunk
                if start < size:
                    out.append(Piece(start, size - start))
                return out
            newline = mm.rfind(b"\n", start, nxt)
            if newline >= 0:
                out.append(Piece(start, newline + 1 - start))
                start = newline + 1
            read_to = nxt


class _Deferred:
    """Stands for the template miner in a worker: the parent mines in file order."""

    def template(self, message: str) -> tuple[str, str]:
        return "", ""


_engine: Engine | None = None
_path = ""
_render: Callable[[Finding], Any] = repr
_counts: Any = None


def _init(
    engine: Engine | None, rules: Any, path: str, render: Callable[[Finding], Any], counts: Any
) -> None:
    global _engine, _path, _render, _counts
    _die_with_parent()
    if engine is None:  # a spawned worker builds its own engine (the packs are cached)
        rules, before, after = rules
        engine = Engine(rules, clock=lambda: 0.0, context_before=before, context_after=after)
    if engine.templates is not None:
        engine.templates = _Deferred()  # type: ignore[assignment]
    _engine, _path, _render, _counts = engine, path, render, counts


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """A worker is killed when the scan that started it dies (SIGKILLed, the OOM killer):
    it would otherwise wait forever for a chunk, as it holds the task pipe's write end
    itself (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing is done)."""
    started_by = multiprocessing.parent_process()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if started_by is not None and os.getppid() != started_by.pid:
        os._exit(1)  # the parent died before the signal was asked for


def _read(piece: Piece) -> bytes:
    fd = os.open(_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.pread(fd, piece.length, piece.offset)
    finally:
        os.close(fd)
    return data if data.endswith(b"\n") else data + b"\n"


def _first_line(index: int) -> int:
    """The number of the first line of chunk ``index``: one more than the newlines of the
    chunks before it, which the workers that took them publish before they scan. Those were
    taken before this one, so each is counted within a few milliseconds of being taken."""
    counts = _counts
    while True:
        before = counts[:index]
        if min(before, default=0) >= 0:
            return 1 + int(sum(before))
        time.sleep(0.0005)


def _scan(task: tuple[int, Piece, str, str]) -> tuple[int, list[tuple[bool, Any]]]:
    """A chunk's newlines and its findings, rendered here unless the parent must first mine
    their template (then sent as they are, ``True``). The chunk's newlines are counted once,
    published for the chunks after it, and handed to the engine."""
    index, piece, label, kind = task
    assert _engine is not None
    data = _read(piece)
    marks = newline_marks(data)
    newlines = marks[-1]
    _counts[index] = newlines
    chunk = LogChunk(label, kind, piece.offset, data, first_line=_first_line(index), lines=newlines)
    render = _render
    deferred = _engine.templates is not None
    with paused_gc():  # rendering makes no cycles either
        found = _engine.scan(chunk, marks)
        out = [
            (True, f)
            if deferred and (f.rule == UNRECOGNISED or is_inferred(f))
            else (False, render(f))
            for f in found
        ]
    return newlines, out


def scan_pieces(
    engine: Engine,
    path: str,
    label: str,
    kind: str,
    parts: list[Piece],
    jobs: int,
    render: Callable[[Finding], T],
) -> Iterator[tuple[int, int, list[T]]]:
    """(bytes, newlines, findings) of each chunk of ``path`` in file order, scanned by
    ``jobs`` worker processes; findings are those ``engine`` gives scanning the chunks in
    order (its templates learn as they would), each passed through ``render`` (in the
    worker: what comes back is what the caller keeps, a printed line rather than evidence)."""
    # fork shares the built engine; with other threads alive (a progress bar) a forked
    # child could inherit a held lock, so workers are spawned and build their own
    fork = threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if fork else "spawn")
    # each chunk's newlines, -1 until its worker counted them (shared memory, no lock: one
    # writer per slot)
    counts = ctx.Array("q", [-1] * len(parts), lock=False)
    settings = (engine.rules, engine.context_before, engine.context_after)
    args = (engine, None, path, render, counts) if fork else (None, settings, path, render, counts)
    # concurrent.futures rather than multiprocessing.Pool: Pool's worker-handler thread waits
    # on the results pipe it never reads, so it spins while a result is in flight (a sixth
    # of a 600 MB scan's CPU time, on a core the workers need)
    pool = ProcessPoolExecutor(
        min(jobs, len(parts)), mp_context=ctx, initializer=_init, initargs=args
    )
    tasks = [(i, piece, label, kind) for i, piece in enumerate(parts)]
    # a generator (concurrent.futures' result_iterator): closing it cancels what is pending
    results = cast(
        Generator[tuple[int, list[tuple[bool, Any]]], None, None], pool.map(_scan, tasks)
    )
    done = False
    try:
        for piece in parts:
            try:
                newlines, found = next(results)
            except BrokenProcessPool as exc:
                raise WorkerDied(path, piece.offset) from exc
            yield (
                piece.length,
                newlines,
                [_mined(engine, f, render) if raw else f for raw, f in found],
            )
        done = True
    finally:
        # a caller that stops early (a closed pipe: `rules scan big.log | head`, Ctrl-C)
        # waits for no chunk it will not read: the ones not started are cancelled. A scan
        # that read every chunk waits for the idle workers to go: a pool whose manager
        # thread still runs at exit races concurrent.futures' own exit hook, which then
        # prints "OSError: [Errno 9] Bad file descriptor" (CPython 3.11 _python_exit
        # writes to the wake-up pipe the thread is closing)
        results.close()
        pool.shutdown(wait=done, cancel_futures=not done)


class WorkerDied(OSError):
    """A worker process of an offline scan ended abruptly (the kernel's OOM killer, a
    signal): the findings of the chunks before ``offset`` were given, the rest are not. An
    ``OSError``, as a file that cannot be read, so a caller reports it with that file and
    goes on with the next one."""

    def __init__(self, path: str, offset: int) -> None:
        super().__init__(
            f"a scan worker process died (killed?) at byte {offset}: the findings after it "
            "are missing; rerun with --jobs 1 to scan in one process"
        )
        self.strerror = str(self.args[0])
        self.path = path
        self.offset = offset


def _mined(engine: Engine, f: Finding, render: Callable[[Finding], T]) -> T:
    """An unrecognised finding (inferred or not) with its template mined in file order,
    rendered."""
    assert engine.templates is not None
    template, template_id = engine.templates.template(f.captures["message"])
    captures = {**f.captures, "template_id": template_id, "template": template}
    summary = summary_of(captures) if is_inferred(f) else template
    f = dataclasses.replace(f, summary=summary, captures=captures)
    return render(f)


def as_is(finding: Finding) -> Finding:
    """The finding itself, for a caller that keeps its evidence (``render`` of
    :func:`scan_pieces`)."""
    return finding


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic collector off for a while (a chunk's scan): the engine makes no cycles,
    and a failure-dense chunk keeps thousands of findings alive that every collection would
    walk again (about a sixth of the scan's time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


__all__ = [
    "BLOCK",
    "Piece",
    "WorkerDied",
    "as_is",
    "block_for",
    "block_of",
    "default_jobs",
    "paused_gc",
    "pieces",
    "regular_pieces",
    "scan_pieces",
]
