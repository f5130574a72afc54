"""The lookahead in front of the code forms (rules/codes.py) lets through every byte a form
can start with, so it changes no match."""

from __future__ import annotations

import json
import re
import re._parser as sre  # type: ignore[import-not-found]  # no stub
from pathlib import Path
from typing import Any

from ascend_doctor.rules import codes

ROOT = Path(__file__).parent.parent
_ZERO_WIDTH = {sre.ASSERT, sre.ASSERT_NOT, sre.AT}


def _first(items: Any) -> set[int] | None:
    """The bytes a parsed sequence can start with (None: it can match empty)."""
    for op, av in items:
        if op in _ZERO_WIDTH:
            continue
        if op is sre.LITERAL:
            return {av}
        if op is sre.IN:
            out: set[int] = set()
            for kind, value in av:
                if kind is sre.LITERAL:
                    out.add(value)
                elif kind is sre.RANGE:
                    out.update(range(value[0], value[1] + 1))
                else:
                    raise AssertionError(f"a form starts with {kind}: extend this test")
            return out
        if op is sre.SUBPATTERN:
            got = _first(av[3])
        elif op is sre.BRANCH:
            alts = [_first(alt) for alt in av[1]]
            got = None if any(a is None for a in alts) else set().union(*alts)  # type: ignore[arg-type]
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            got = _first(av[2]) if av[0] >= 1 else None
            if got is None:
                raise AssertionError("a form starts with an optional part: extend this test")
        else:
            raise AssertionError(f"a form starts with {op}: extend this test")
        if got is not None:
            return got
    return None


def test_every_form_starts_with_a_first_byte() -> None:
    for form in codes._FORMS:
        first = _first(sre.parse(form))
        assert first is not None, form
        assert first <= set(codes.FIRST_BYTES), (
            form,
            bytes(sorted(first - set(codes.FIRST_BYTES))),
        )


def test_same_matches_as_without_the_lookahead_on_the_corpus() -> None:
    plain = re.compile(b"|".join(codes._FORMS), re.MULTILINE)
    texts = [
        json.loads(line)["text"].encode()
        for part in ("dev",)
        for name in ("failures.jsonl", "benign.jsonl")
        for line in (ROOT / "corpus" / part / name).read_text(encoding="utf-8").splitlines()
    ]
    texts += [p.read_bytes() for p in sorted((ROOT / "fixtures").rglob("*.log"))]
    seen = 0
    for text in texts:
        want = [(m.start(), m.end(), m.lastgroup) for m in plain.finditer(text)]
        assert [
            (m.start(), m.end(), m.lastgroup) for m in codes.CODE_PATTERN.finditer(text)
        ] == want
        seen += len(want)
    assert seen > 100


def test_every_runtime_reason_names_its_acl_code_as_the_runtime_prints_it() -> None:
    # "<api> execute failed, reason=[<text>]" (hicann/runtime errcode_manage.cc): a reason of
    # more than one sentence or with a full stop ("Failed to create the stream object. The host
    # memory has been exhausted.") was cut at its first sentence and named nothing
    from ascend_doctor.rules.catalogue import load_catalogues

    cats = load_catalogues([])
    index = codes.CodeIndex(cats)
    reasons = cats.by_kind["runtime_reason"]
    assert len(reasons) > 300
    missed = []
    for entry in reasons.values():
        for form in ("reason=[{}]", "reason=[{}][FUNC:Foo][FILE:api.cc][LINE:1]"):
            line = ("rtStreamCreate execute failed, " + form.format(entry.meaning)).encode()
            if not any(h.entry.code == entry.target for h in index.scan(line)):
                missed.append((entry.meaning, form))
    assert missed == []
