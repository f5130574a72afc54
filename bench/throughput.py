"""Benchmark 1 (issues 3 and 18): scan throughput of the full builtin pack versus grep.

Generates a ~200 MB log mixing realistic vLLM and CANN plog lines (1 error line in
10,000), then in the same run times:
  grep -E -c -f families.txt       one pattern per failure family, as an operator greps
                                   (the reference of issue 18's goal)
  grep -E -c -f whole-pack.txt     every rule's pattern rewritten to POSIX ERE (issue 3's
                                   reference; slower than what an operator types)
  ascend-doctor rules scan --json  the whole process: start-up, every core (issue 18's goal:
                                   <= 0.5 x the families grep)
  the doctor's engine in-process   hyperscan, and the pure-Python re fallback (--with-re)
and prints MB/s and the time ratios.

    python bench/throughput.py [--mb 200] [--keep FILE] [--with-re] [--no-whole-pack]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import SCAN_BENIGN

from ascend_doctor.core.events import LogChunk
from ascend_doctor.rules import Engine, RuleSet, load_rules

CHUNK = 4 << 20


CLASS_IN_BRACKET = {"d": "0-9", "s": "[:space:]", "w": "[:alnum:]_", "n": "", "t": "\t"}


def _bracket(body: str) -> str:
    """A Python bracket body as POSIX reads it: escapes resolved, ']' first, '[' and '-' last."""
    negate = body.startswith("^")
    body = body[1:] if negate else body
    text, close, open_, dash = "", False, False, False
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt == "]":
                close = True
            elif nxt == "[":
                open_ = True
            elif nxt == "-":
                dash = True
            else:
                text += CLASS_IN_BRACKET.get(nxt, nxt)
            i += 2
            continue
        if c == "[":
            open_ = True  # a literal '[' (Python needs no escape) must not open '[.' in POSIX
        else:
            text += c
        i += 1
    if negate and not (text or close or open_ or dash):
        return "."  # [^\n]: grep reads lines, so any character
    return (
        "["
        + ("^" if negate else "")
        + ("]" if close else "")
        + text
        + ("[" if open_ else "")
        + ("-" if dash else "")
        + "]"
    )


def ere(pattern: str) -> str:
    """A Python pattern as GNU grep -E reads it (same lines for the shipped rules)."""
    out: list[str] = []
    i = 0
    p = re.sub(r"\(\?P<\w+>", "(", pattern).replace("(?:", "(")
    while i < len(p):
        c = p[i]
        if c == "\\" and i + 1 < len(p):
            nxt = p[i + 1]
            out.append({"d": "[0-9]"}.get(nxt, c + nxt))
            i += 2
        elif c == "[":
            j = i + 1
            if j < len(p) and p[j] == "^":
                j += 1
            if j < len(p) and p[j] == "]":
                j += 1
            while j < len(p) and p[j] != "]":
                j += 2 if p[j] == "\\" else 1
            out.append(_bracket(p[i + 1 : j]))
            i = j + 1
        elif c in "*+?}" and i + 1 < len(p) and p[i + 1] == "?":
            out.append(c)  # lazy quantifiers match the same lines
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


FAMILIES = {
    "kv_cache_insufficient": r"KV cache|num_gpu_blocks|larger than the maximum number of tokens",
    "npu_oom": r"NPU out of memory|EL0004|Memory_Allocation_Failure|halMemAlloc failed",
    "device_busy": r"[Dd]evice (is )?busy|is occupied|Device or resource busy",
    "npu_resource_exhausted": r"507033|resource (is )?exhausted|exceeds? the limit",
    "graph_capture_error": r"[Gg]raph capture|aclmdlRI|ACLGraph",
    "aicore_error": r"[Aa]icore|AICore|507015|507035|vector core",
    "hccl_timeout": r"HCCL.*time(d)? ?out|Watchdog caught|EI0002|EI0006",
    "hccl_link_error": r"Transport init error|RoCE|EJ000[0-9]|HCCL function error",
    "device_fault": r"[Ee]rror [Cc]ode *:|[Ff]ault code|[Hh]eartbeat lost|ECC",
    "device_unavailable": r"SetDevice|EL0001|[Dd]evice not found|drvError",
    "env_mismatch": r"undefined symbol|ImportError|ModuleNotFoundError|Failed to import",
    "engine_dead": r"EngineDeadError|Engine loop is not running|EngineCore.*(died|failed)",
    "port_in_use": r"[Aa]ddress already in use|Errno 98|Failed to bind",
    "model_config_error": r"ValueError|NotImplementedError|must be divisible|not supported",
    "host_oom": r"Out of memory: Kill|oom-kill|oom_reaper",
    "server_crashed": r"Segmentation fault|Fatal Python error|core dumped",
}
"""One ERE per failure family: what an operator types to grep a log for failures (issue 18's
honest reference), not the packs' exact patterns."""


def generate(path: Path, megabytes: int, rules: RuleSet) -> int:
    errors = [line for r in rules.text for line in r.examples["match"]]
    rng = random.Random(42)
    target = megabytes << 20
    written = 0
    with path.open("w", encoding="utf-8") as f:
        while written < target:
            lines = []
            for i in range(10_000):
                tpl = SCAN_BENIGN[rng.randrange(len(SCAN_BENIGN))]
                lines.append(tpl.format(s=i % 60, n=rng.randrange(10_000, 60_000)))
            lines[rng.randrange(10_000)] = rng.choice(errors)
            text = "\n".join(lines) + "\n"
            f.write(text)
            written += len(text)
    return written


def one_source(rules: RuleSet) -> RuleSet:
    """Every rule reads every line of the benchmark file, as grep does."""
    text = tuple(dataclasses.replace(r, sources=("server",)) for r in rules.text)
    return RuleSet(text, rules.thresholds)


def scan(engine: Engine, path: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    found = 0
    with path.open("rb") as f:
        pending = b""
        offset = 0
        while block := f.read(CHUNK):
            data = pending + block
            cut = data.rfind(b"\n") + 1
            found += len(engine.scan(LogChunk(str(path), "server", offset, data[:cut])))
            offset += cut
            pending = data[cut:]
    return time.perf_counter() - t0, found


CPU: dict[str, float] = {}
"""CPU time (user + system, its children included) of each timed command, by its first word
and the first argument that tells it apart."""


def timed(cmd: list[str]) -> tuple[float, str]:
    """Wall time of a whole process, and its stdout (its CPU time goes into ``CPU``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[" ".join(cmd[-2:])] = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, proc.stdout


def doctor() -> list[str]:
    """The installed ``ascend-doctor`` next to this Python, else ``python -m``."""
    exe = Path(sys.executable).with_name("ascend-doctor")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ascend_doctor"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument(
        "--keep",
        type=Path,
        help="reuse or keep the generated log here (a file, or a directory for bench.log)",
    )
    ap.add_argument("--with-re", action="store_true", help="also time the pure-Python path")
    ap.add_argument(
        "--no-whole-pack",
        action="store_true",
        help="skip the whole-pack grep (GNU grep's DFA of every rule runs at a few MB/s)",
    )
    args = ap.parse_args()
    rules = one_source(load_rules())
    tmp = Path(tempfile.mkdtemp())
    log = args.keep or tmp / "bench.log"
    if log.is_dir():  # as bench/dense.py's --keep DIR
        log = log / "bench.log"
    if not log.exists():
        generate(log, args.mb, rules)
    size_mb = log.stat().st_size / (1 << 20)
    whole = tmp / "whole-pack.txt"
    whole.write_text("\n".join(ere(r.pattern) for r in rules.text) + "\n")
    families = tmp / "families.txt"
    families.write_text("\n".join(FAMILIES.values()) + "\n")
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the cache

    t_fam, n_fam = timed(["grep", "-E", "-c", "-f", str(families), str(log)])
    t_grep, n_grep = (
        (0.0, "skipped")
        if args.no_whole_pack
        else timed(["grep", "-E", "-c", "-f", str(whole), str(log)])
    )
    cpu_fam = CPU[f"{families} {log}"]
    t_cli, out_cli = timed([*doctor(), "rules", "scan", "--json", str(log)])
    cpu_cli = CPU[f"--json {log}"]
    hs = Engine(rules, matcher="auto", clock=lambda: 0.0)
    t_hs, n_hs = scan(hs, log)
    print(f"log: {size_mb:.0f} MB, {len(rules.text)} rules, {len(FAMILIES)} families")
    print(
        f"grep -E -c -f families ({len(FAMILIES)} patterns): {t_fam:6.2f} s"
        f"  {size_mb / t_fam:7.1f} MB/s  ({n_fam.strip()} lines)  cpu {cpu_fam:.2f} s"
    )
    if t_grep:
        print(
            f"grep -E -c -f whole pack ({len(rules.text)} ERE)  : {t_grep:6.2f} s"
            f"  {size_mb / t_grep:7.1f} MB/s  ({n_grep.strip()} lines)"
        )
    print(
        f"ascend-doctor rules scan --json     : {t_cli:6.2f} s  {size_mb / t_cli:7.1f} MB/s"
        f"  ({out_cli.count(chr(10))} findings)  ratio to families grep {t_cli / t_fam:.2f}"
        f" (goal <= 0.5)  cpu {cpu_cli:.2f} s on {os.cpu_count()} cores"
    )
    print(
        f"engine in-process ({hs.matcher:9})    : {t_hs:6.2f} s  {size_mb / t_hs:7.1f} MB/s"
        f"  ({n_hs} findings)"
        + (f"  ratio to whole-pack grep {t_hs / t_grep:.2f} (goal <= 1.0)" if t_grep else "")
    )
    # the same file as `rules scan` reads it (a server log: rules of plog, slog, device and
    # host lines do not apply), in one process: what the workers must have found too
    real = load_rules()
    _, n_serial = scan(Engine(real, clock=lambda: 0.0), log)
    n_cli = out_cli.count(chr(10))
    others = sum(1 for r in real.text if "server" not in r.sources)
    print(
        f"engine in-process, as a server log  : {n_serial} findings,"
        f" {'the same as' if n_serial == n_cli else 'NOT the same as'} rules scan's {n_cli}"
        f" (the line above runs all rules on every line, as grep does: it also finds the"
        f" examples of the {others} rules of plog, slog, device and host logs that were"
        f" written into the file)"
    )
    if args.with_re:
        t_re, n_re = scan(Engine(rules, matcher="re", clock=lambda: 0.0), log)
        print(
            f"engine in-process (re)           : {t_re:6.2f} s  {size_mb / t_re:7.1f} MB/s"
            f"  ({n_re} findings)"
            + (f"  ratio to whole-pack grep {t_re / t_grep:.2f}" if t_grep else "")
        )
    if args.keep is None:
        log.unlink()


if __name__ == "__main__":
    main()
