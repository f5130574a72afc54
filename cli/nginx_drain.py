"""Take one vLLM server out of an nginx upstream, or put it back: the ``[ha] drain_command``
and ``undrain_command`` of ascend-doctor for the layout in deploy/nginx/
(docs/high-availability.md). Standard library only: it loads nothing else of the doctor.

    ascend-doctor-nginx-drain down NAME --servers FILE [-- NGINX ARGS...]
    ascend-doctor-nginx-drain up   NAME --servers FILE [-- NGINX ARGS...]

FILE is the include the upstream block reads; each server line ends with ``# NAME``:

    server 127.0.0.1:8001 max_fails=1 fail_timeout=10s; # vllm-a

``down`` adds nginx's ``down`` parameter to NAME's line, ``up`` removes it; the file is replaced
atomically (a reader never sees half of it) under a lock (two servers drained at once do not
lose each other's change), then ``nginx ARGS -s reload`` makes nginx read it: new workers take
the new list, old workers finish the requests they have (nginx's graceful reload). When the
reload fails the old file is put back. No shell anywhere: every argument is passed as is.
Exit status 0 when nginx reloaded, 1 on any error (said on stderr), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ascend_doctor.core import regex

LINE = regex.compile(r"^(?P<head>\s*server\s+\S+)(?P<params>[^;#]*);\s*#\s*(?P<name>\S+)\s*$")


def rewrite(text: str, name: str, down: bool) -> str:
    """``text`` with NAME's server line marked down (or not); ValueError when no line is."""
    out: list[str] = []
    found = False
    for line in text.splitlines(keepends=True):
        m = LINE.match(line.rstrip("\n"))
        if m is None or m.group("name") != name:
            out.append(line)
            continue
        found = True
        params = [p for p in m.group("params").split() if p != "down"]
        if down:
            params.append("down")
        body = " ".join([m.group("head").rstrip(), *params])
        out.append(f"{body}; # {name}\n")
    if not found:
        raise ValueError(f"no 'server ...; # {name}' line")
    return "".join(out)


def _replace(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str]) -> int:
    """Run the command line ``argv`` (without the program name)."""
    nginx = ["nginx"]
    if "--" in argv:
        i = argv.index("--")
        argv, nginx = argv[:i], argv[i + 1 :] or nginx
    parser = argparse.ArgumentParser(prog="ascend-doctor-nginx-drain")
    parser.add_argument("action", choices=("down", "up"))
    parser.add_argument("name")
    parser.add_argument("--servers", required=True, type=Path, help="the upstream's include")
    args = parser.parse_args(argv)
    path: Path = args.servers
    try:
        with open(path.with_name(path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            old = path.read_text(encoding="utf-8")
            _replace(path, rewrite(old, args.name, args.action == "down"))
            # the new file is checked before nginx is asked to read it
            done = subprocess.run([*nginx, "-t", "-q"], capture_output=True, text=True, timeout=30)
            if done.returncode == 0:
                done = subprocess.run(
                    [*nginx, "-s", "reload"], capture_output=True, text=True, timeout=30
                )
            if done.returncode != 0:
                _replace(path, old)
                said = (done.stderr or done.stdout).strip()[-300:]
                print(f"nginx reload failed ({done.returncode}): {said}", file=sys.stderr)
                return 1
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 1
    print(f"{args.name} {args.action} in {path}; nginx reloaded")
    return 0


def entry() -> None:
    """The ``ascend-doctor-nginx-drain`` console script."""
    sys.exit(main(sys.argv[1:]))


__all__ = ["entry", "main", "rewrite"]


if __name__ == "__main__":
    entry()
