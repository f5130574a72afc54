"""Accuracy of the rule packs on real posted lines (issue 14): recall, false alarms, root causes.

    python bench/accuracy.py [--part dev|heldout|all] [--json] [--show-misses] [--causes]
                             [--corpus DIR] [--matcher re|hyperscan|auto]

The corpus is tests/corpus/ (see its README.md): ``dev/`` is what rules are written from,
``heldout/`` is only ever scored against. For each part it prints, per form of the lines (raw,
with a vLLM worker tag, with a rank prefix, with a kubelet prefix, as Docker json-file records):

- recall with the right category: failure entries with a finding of their category;
- recall with any category: failure entries with any finding (``unrecognised`` included);
- right without inference: those whose category a rule or a catalogued code gives, not only
  the classifier of unexplained errors (rules/infer.py: a finding ``inferred:<category>``,
  which ``rules scan`` and ``diagnose`` print as "likely <category>" and the daemon files as
  unrecognised);
- false alarms: benign entries with any finding;
- recall per category;

"a finding" meaning one of severity warning or above, as `rules scan` reports it. Then, for each
whole incident log, whether ``ascend-doctor diagnose LOG --json`` ranks a root cause of the
maintainers' category first, and whether its evidence holds the line they named;
``--causes`` adds the categories of every root cause it names, in its order (categories only,
never the lines: an aggregate that is safe to read on the held-out part).

Every entry is scored on its own, with a fresh engine (see corpus.py). The default matcher is
Python ``re``: building a hyperscan database per entry costs ~0.2 s, and ``rules test`` holds
both paths to the same results; ``--matcher hyperscan`` checks the other one (a few minutes).
A benchmark: it always exits 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corpus import (
    FORMS,
    CorpusError,
    EngineFactory,
    Entry,
    Incident,
    judge_incident,
    load_entries,
    load_incidents,
    score_entries,
)

from ascend_doctor.rules import Engine, load_rules

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
PARTS = {"dev": "d-", "heldout": "h-"}


Diagnose = Callable[[Incident], dict[str, Any]]


def score_part(
    folder: Path, new_engine: EngineFactory, diagnose: Diagnose | None = None
) -> dict[str, Any]:
    """Every figure of one part of the corpus (``dev/`` or ``heldout/``). ``diagnose`` turns an
    incident into its ``diagnose --json`` report (default: run the real CLI)."""
    failures = load_entries(folder / "failures.jsonl", "", failures=True)
    benign = load_entries(folder / "benign.jsonl", "", failures=False)
    incidents = load_incidents(folder / "incidents")
    out: dict[str, Any] = {
        "failures": len(failures),
        "benign": len(benign),
        "incidents": len(incidents),
        "forms": {},
        "categories": {},
        "misses": {},
    }
    hit = score_entries(failures, new_engine)
    alarm = score_entries(benign, new_engine)
    per_category: dict[str, Counter[str]] = {}
    for form in FORMS:
        right = [e for e in failures if e.category in hit[form][e.id].categories]
        known = [e for e in failures if e.category in hit[form][e.id].known]
        seen = [e for e in failures if hit[form][e.id].categories]
        alarms = [e for e in benign if alarm[form][e.id].categories]
        out["forms"][form] = {
            "right": len(right),
            "right_known": len(known),
            "any": len(seen),
            "false_alarms": len(alarms),
            "recall_right": _ratio(len(right), len(failures)),
            "recall_any": _ratio(len(seen), len(failures)),
        }
        right_ids = {e.id for e in right}
        out["misses"][form] = {
            "failures": [
                _miss(e, hit[form][e.id].categories) for e in failures if e.id not in right_ids
            ],
            "false_alarms": [_miss(e, alarm[form][e.id].categories) for e in alarms],
        }
        for e in failures:
            counts = per_category.setdefault(str(e.category), Counter())
            counts[f"{form}_right"] += e.id in right_ids
            counts[f"{form}_any"] += bool(hit[form][e.id].categories)
    totals = Counter(str(e.category) for e in failures)
    for category in sorted(totals):
        out["categories"][category] = {"n": totals[category], **per_category[category]}
    run = diagnose or _diagnose_cli
    out["incident_results"] = [_judge(i, run) for i in incidents]
    return out


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _miss(entry: Entry, found: set[str]) -> dict[str, Any]:
    return {"id": entry.id, "expected": entry.category, "found": sorted(found), "text": entry.text}


def _judge(incident: Incident, diagnose: Diagnose) -> dict[str, Any]:
    try:
        report = diagnose(incident)
    except RuntimeError as exc:
        return {**judge_incident(incident, {}), "error": str(exc)}
    return judge_incident(incident, report)


def _diagnose_cli(incident: Incident) -> dict[str, Any]:
    """Run the real CLI on the log, as an operator would."""
    cmd = [sys.executable, "-m", "ascend_doctor", "diagnose", str(incident.log), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        report: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"diagnose exit {proc.returncode}: {tail[0]}") from None
    return report


def _pct(value: float | None) -> str:
    return "   n/a" if value is None else f"{100 * value:5.1f}%"


def print_part(
    name: str, folder: Path, result: dict[str, Any], show_misses: bool, causes: bool = False
) -> None:
    """The human-readable figures of one part."""
    print(f"== {name} ({folder})")
    if not result["failures"] and not result["benign"] and not result["incidents"]:
        print(f"   no entries: {folder} is missing or empty")
        return
    print(
        f"   {result['failures']} failure entries, {result['benign']} benign entries, "
        f"{result['incidents']} incident logs"
    )
    print(
        f"   {'form':8} {'right category':>22} {'any category':>22} {'false alarms':>16}"
        f"   right without inference"
    )
    for form, f in result["forms"].items():
        print(
            f"   {form:8} {f['right']:5}/{result['failures']:<5} {_pct(f['recall_right'])}"
            f"   {f['any']:5}/{result['failures']:<5} {_pct(f['recall_any'])}"
            f"   {f['false_alarms']:5}/{result['benign']:<5}"
            f"   {f['right_known']:5}/{result['failures']:<5}"
        )
    if result["categories"]:
        print(f"   {'category':24} {'n':>4}  right: " + "  ".join(f"{f:>7}" for f in FORMS))
        for category, c in result["categories"].items():
            cells = "  ".join(f"{c.get(f + '_right', 0):3}/{c['n']:<3}" for f in FORMS)
            print(f"   {category:24} {c['n']:4}         {cells}")
    incidents = result["incident_results"]
    if incidents:
        first = sum(r["root_cause_first"] for r in incidents)
        print(f"   incidents: root cause first {first}/{len(incidents)}")
        for r in incidents:
            mark = "ok " if r["root_cause_first"] else "MISS"
            extra = "" if r["evidence_has_text"] else " (evidence lacks the named line)"
            note = f" [{r['error']}]" if "error" in r else ""
            print(
                f"   {mark} {r['name']}: expected {r['expected']}, first {r['first']}"
                f"{extra if r['root_cause_first'] else ''}{note}"
            )
            if causes:
                print("        causes: " + " > ".join(str(c) for c in r["root_causes"]))
    if show_misses:
        for form, misses in result["misses"].items():
            for m in misses["failures"]:
                print(
                    f"   miss [{form}] {m['id']} want {m['expected']} got {m['found']}: "
                    + m["text"].split("\n")[0][:160]
                )
            for m in misses["false_alarms"]:
                print(
                    f"   alarm [{form}] {m['id']} {m['found']}: " + m["text"].split("\n")[0][:160]
                )


def main(argv: list[str] | None = None) -> int:
    """Score the chosen parts and print the figures; always 0 (a benchmark, not a gate)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["dev", "heldout", "all"], default="all")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--show-misses", action="store_true", help="list missed entries and alarms")
    ap.add_argument(
        "--causes",
        action="store_true",
        help="for each incident log, the categories of the root causes named, in order",
    )
    ap.add_argument(
        "--corpus", type=Path, default=CORPUS, help="corpus root (default: %(default)s)"
    )
    ap.add_argument("--matcher", choices=["re", "hyperscan", "auto"], default="re")
    args = ap.parse_args(argv)
    parts = list(PARTS) if args.part == "all" else [args.part]
    if args.show_misses and "heldout" in parts:
        print(
            "warning: --show-misses on held-out lines: never write or tune a rule from them "
            "(move a line to dev/ if you do, and say so)",
            file=sys.stderr,
        )
    rules = load_rules()

    def new_engine() -> Engine:
        return Engine(rules, clock=lambda: 0.0, matcher=args.matcher)

    results: dict[str, Any] = {}
    for part in parts:
        try:
            results[part] = score_part(args.corpus / part, new_engine)
        except CorpusError as exc:
            print(f"error: {exc}", file=sys.stderr)
            results[part] = {"error": str(exc)}
            continue
        if not args.show_misses:
            results[part].pop("misses")
    if args.json:
        print(json.dumps({"matcher": new_engine().matcher, "parts": results}, indent=2))
        return 0
    for part, result in results.items():
        if "error" not in result:
            print_part(part, args.corpus / part, result, args.show_misses, args.causes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
