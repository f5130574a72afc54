"""What the doctor sees of a failure no rule knows (issue 14): leave-one-rule-out on the
development corpus.

A rule is written from the lines it was written from; a failure it has not seen yet (a new
wording, a library beside vLLM) meets the packs without it. This measures how the engine
fares then, on development data only: for each failure entry of ``tests/corpus/dev/`` that a
text rule recognises, the rules whose findings it raised are removed and the entry is
scanned again. It is then

- ``still right``: another rule or a catalogued code gives its category;
- ``other category``: another rule gives another category;
- ``unrecognised``: only the unrecognised pass sees it (a finding of severity warning or
  above: surfaced, never remediated);
- ``invisible``: no finding at all (what "nothing stays invisible" forbids).

Entries no text rule recognises (codes alone) are counted apart. The held-out part is never
read here. A benchmark: it always exits 0.

    python bench/visibility.py [--show-invisible]

The engine infers a family for an unexplained error from its words (rules/infer.py), with a
model trained on the loaded rules' examples: here the removed rules' examples are not among
them, so ``still right`` counts what the classifier names right without having seen the rule.

Measured 2026-12-07 (244 entries): 35 by codes alone; of the 209 others, 117 still right, 18
another category, 70 unrecognised, 4 invisible. Earlier the same day: without the inference
67 still right, 6 another category and 131 unrecognised; before the unrecognised pass read
failures stated without a header and indented ERROR lines that continue nothing, 24 invisible.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import sys
from collections import Counter
from pathlib import Path

from corpus import KIND_PATH, load_entries

from ascend_doctor.collectors.logs import read_chunks, source_kind
from ascend_doctor.core.events import Finding, Severity
from ascend_doctor.rules import Engine, RuleSet, load_rules

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "tests" / "corpus" / "dev" / "failures.jsonl"


def scan(rules: RuleSet, text: str, kind: str) -> list[Finding]:
    """The findings of severity warning or above of ``text`` as a whole file of ``kind``."""
    engine = Engine(rules, clock=lambda: 0.0, matcher="re")
    path = KIND_PATH[kind]
    out: list[Finding] = []
    for chunk in read_chunks(io.BytesIO((text + "\n").encode()), path, source_kind(path)):
        out += [f for f in engine.scan(chunk) if f.severity >= Severity.WARNING]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--show-invisible", action="store_true", help="list the invisible entries")
    args = ap.parse_args(argv)
    rules = load_rules()
    counts: Counter[str] = Counter()
    invisible = []
    for entry in load_entries(DEV, "", failures=True):
        own = {
            f.rule
            for f in scan(rules, entry.text, entry.kind)
            if not f.rule.startswith("code:") and f.rule != "unrecognised"
        }
        if not own:
            counts["codes alone"] += 1
            continue
        without = dataclasses.replace(rules, text=tuple(r for r in rules.text if r.id not in own))
        cats = {f.category.value for f in scan(without, entry.text, entry.kind)}
        if not cats:
            counts["invisible"] += 1
            invisible.append(entry)
        elif entry.category in cats:
            counts["still right"] += 1
        elif cats == {"unrecognised"}:
            counts["unrecognised"] += 1
        else:
            counts["other category"] += 1
    total = sum(counts.values())
    print(f"development failure entries: {total}, with their own rules removed:")
    for name in ("codes alone", "still right", "other category", "unrecognised", "invisible"):
        print(f"  {name:<15} {counts[name]:>4}")
    if args.show_invisible:
        for e in invisible:
            print(f"  invisible {e.id} [{e.category}] {e.text[:160]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
