"""Docker's json-file logs, read as the lines the server printed.

A container engine that logs with Docker's default ``json-file`` driver writes each line of
the container's output as one JSON record
(https://docs.docker.com/engine/logging/drivers/json-file/)::

    {"log":"Log line is here\\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}

That is what a node running Docker (dockershim, cri-dockerd, Ascend Docker Runtime) keeps
under ``/var/lib/docker/containers/<id>/<id>-json.log``, and what the kubelet's
``/var/log/containers/*.log`` links lead to there. Read as it is, every line starts with
``{"log":"``: no vLLM header is seen (a rule that wants an ERROR line never fires), quotes
come escaped (``\\"``) and ``<`` as ``\\u003c``. A chunk whose first line is such a record is
read record by record as the line the CRI runtimes write for the same output,
``<time> <stream> F <text>`` (``P`` for a record that holds part of a line longer than the
engine's 16 KiB buffer: the record's text does not end in a newline), whose prefix the line
parser already knows. A line that is not a record (cut, corrupt) is read as it is.

Offsets stay the file's: findings and their evidence name the byte offset of the record in
the file, so a doctor that reads a file again from a checkpoint, cut elsewhere, names every
line by the same offset (that is how repeated findings are dropped). Line numbers are the
file's too: one record is one line.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

from ascend_doctor.core import regex
from ascend_doctor.core.events import Finding, LogChunk

DOCKER_HEAD = b'{"log":"'
"""How every record of a json-file log starts (moby's jsonlog writes ``log`` first)."""


_PLAIN = regex.compile(
    rb'\{"log":"([^"\\]*)(\\n)?","stream":"(stdout|stderr)","time":"([\w:.+-]{1,64})"\}\r?'
)
"""A record as Docker writes most: a text with no escape but its final newline (read without
a JSON parser: half the time)."""


def _record(line: bytes) -> bytes | None:
    """The CRI form of one json-file record, or None when the line is not one."""
    if not line.startswith(DOCKER_HEAD):
        return None
    plain = _PLAIN.fullmatch(line)
    if plain is not None:
        text, whole, stream, time = plain.groups()
        return b"%s %s %s %s" % (time, stream, b"P" if whole is None else b"F", text)
    return _parsed(line)


def _parsed(line: bytes) -> bytes | None:
    """:func:`_record` by the JSON parser (escapes, other fields, another order)."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    text, stream, time = obj.get("log"), obj.get("stream"), obj.get("time")
    if not isinstance(text, str):
        return None
    whole = text.endswith("\n")
    if whole:
        text = text[:-1]
    # one record is one line: a newline inside (none in what Docker writes) stays escaped
    text = text.replace("\n", "\\n")
    head = ""
    if isinstance(time, str) and isinstance(stream, str) and stream in ("stdout", "stderr"):
        head = f"{time} {stream} {'F' if whole else 'P'} "
    out = (head + text).encode("utf-8", "replace")
    # never longer than the record (the offsets of the lines after it stay ahead of theirs)
    return out if len(out) <= len(line) else None


@dataclasses.dataclass(frozen=True, slots=True)
class Decoded:
    """A chunk of a json-file log read as lines, and where each line is in the file."""

    chunk: LogChunk
    """The chunk with each record replaced by its line (same offset, same line count)."""
    starts: dict[int, int]
    """The start of each line in ``chunk.data`` -> the start of its record in the original."""

    def restore(self, findings: Iterable[Finding]) -> list[Finding]:
        """``findings`` of the decoded chunk with the file's offsets."""
        base, starts = self.chunk.offset, self.starts

        def raw(offset: int) -> int:
            return base + starts.get(offset - base, offset - base)

        out = []
        for f in findings:
            evidence = tuple(
                dataclasses.replace(e, offset=raw(e.offset)) if e.path == f.path else e
                for e in f.evidence
            )
            offset = raw(f.offset) if f.offset >= 0 else f.offset
            out.append(dataclasses.replace(f, offset=offset, evidence=evidence))
        return out


def decoded(chunk: LogChunk) -> Decoded | None:
    """``chunk`` read record by record when it is a json-file log's (its first line is a
    record), else None (one comparison: any other chunk costs nothing)."""
    data = chunk.data
    if not data.startswith(DOCKER_HEAD):
        return None
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the chunk's final newline
    out: list[bytes] = []
    starts: dict[int, int] = {}
    pos = raw = 0
    for line in lines:
        text = _record(line)
        new = line if text is None else text
        starts[pos] = raw
        out.append(new)
        pos += len(new) + 1
        raw += len(line) + 1
    body = b"\n".join(out) + b"\n"
    return Decoded(dataclasses.replace(chunk, data=body), starts)


__all__ = ["DOCKER_HEAD", "Decoded", "decoded"]
