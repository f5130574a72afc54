"""Benchmark 1 (issue 3): scan throughput of the full builtin pack versus grep.

Generates a ~200 MB log mixing realistic vLLM and CANN plog lines (1 error line in
10,000), then in the same run times:
  grep -E -c -f PATTERNS FILE      (the same patterns, rewritten to POSIX ERE)
  the doctor's engine (hyperscan)  and  the pure-Python re fallback
and prints MB/s and the time ratios (doctor / grep; goal <= 1.0).

    python bench/throughput.py [--mb 200] [--keep FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
import subprocess
import tempfile
import time
from pathlib import Path

from ascend_doctor.core.events import LogChunk
from ascend_doctor.rules import Engine, RuleSet, load_rules

CHUNK = 4 << 20
BENIGN = [
    "(APIServer pid=728) INFO 09-08 02:55:{s:02d} [loggers.py:123] Engine 000: Avg prompt "
    "throughput: 1523.4 tokens/s, Avg generation throughput: 812.0 tokens/s, Running: 12 reqs,"
    " Waiting: 0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 63.0%",
    '(APIServer pid=728) INFO:     127.0.0.1:{n} - "POST /v1/completions HTTP/1.1" 200 OK',
    "[INFO] HCCL(1210,python3):2026-08-14-11:02:{s:02d}.995.679 [hccl_communicator.cc:{n}]1250"
    " [HCCL_TRACE]SetTimeout: connect timeout 120 s, exec timeout 1836 s",
    "[INFO] RUNTIME(1210,python3):2026-08-14-11:02:{s:02d}.123.456 [stream.cc:{n}]1250 "
    "Create stream success, stream_id={n}",
    "(EngineCore_DP0 pid=276) INFO 09-08 02:55:{s:02d} [core.py:{n}] Scheduler step finished"
    " in 23.1 ms, batch size 12",
]


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


def generate(path: Path, megabytes: int, rules: RuleSet) -> int:
    errors = [line for r in rules.text for line in r.examples["match"]]
    rng = random.Random(42)
    target = megabytes << 20
    written = 0
    with path.open("w", encoding="utf-8") as f:
        while written < target:
            lines = []
            for i in range(10_000):
                tpl = BENIGN[rng.randrange(len(BENIGN))]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--keep", type=Path, help="reuse or keep the generated log here")
    args = ap.parse_args()
    rules = one_source(load_rules())
    tmp = Path(tempfile.mkdtemp())
    log = args.keep or tmp / "bench.log"
    if not log.exists():
        generate(log, args.mb, rules)
    size_mb = log.stat().st_size / (1 << 20)
    patterns = tmp / "patterns.txt"
    patterns.write_text("\n".join(ere(r.pattern) for r in rules.text) + "\n")
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the cache

    t0 = time.perf_counter()
    grep = subprocess.run(
        ["grep", "-E", "-c", "-f", str(patterns), str(log)],
        capture_output=True,
        text=True,
        check=False,
    )
    t_grep = time.perf_counter() - t0
    hs = Engine(rules, matcher="auto", clock=lambda: 0.0)
    t_hs, n_hs = scan(hs, log)
    t_re, n_re = scan(Engine(rules, matcher="re", clock=lambda: 0.0), log)
    print(f"log: {size_mb:.0f} MB, {len(rules.text)} rules")
    print(
        f"grep -E -c -f : {t_grep:6.2f} s  {size_mb / t_grep:7.1f} MB/s"
        f"  ({grep.stdout.strip()} lines)"
    )
    print(
        f"doctor {hs.matcher:9}: {t_hs:6.2f} s  {size_mb / t_hs:7.1f} MB/s  ({n_hs} findings)"
        f"  ratio {t_hs / t_grep:.2f} (goal <= 1.0)"
    )
    print(
        f"doctor re       : {t_re:6.2f} s  {size_mb / t_re:7.1f} MB/s  ({n_re} findings)"
        f"  ratio {t_re / t_grep:.2f}"
    )


if __name__ == "__main__":
    main()
