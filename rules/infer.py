"""The likely family of an error no rule explains, inferred from its words (issue 14).

A multinomial naive Bayes classifier over the tokens of an error unit (lower-cased words,
the parts of a CamelCase or snake_case name, CANN error-code prefixes such as ``EI`` or
``EJ``), trained on the loaded rules' own ``examples: match`` lines, each labelled with its
rule's category, and an ``unrecognised`` class: the error units that the rules' ``no_match``
examples become when the engine reports them as unrecognised. Its posterior weighs the ``n``
tokens of a text as ``EVIDENCE * sqrt(n)`` independent ones (the words of an error come
together: summed as independent, every long block would look certain), and it names no
family from fewer than ``MIN_TOKENS`` of them. When that posterior passes ``THRESHOLD`` an
unrecognised finding carries the likely category, marked inferred: rule
``inferred:<category>``, role symptom, no remediation, its summary naming the tokens it was
inferred from. It ranks after every rule-based cause and before plain unrecognised errors
(``diagnose``), and the doctor files it as an unrecognised incident (never remediated, never
paged as the category it names).

``THRESHOLD``, ``EVIDENCE``, ``MIN_TOKENS`` and ``ALPHA`` were chosen by leave-one-rule-out
cross-validation on the development data only (``bench/infer_cv.py``, whose docstring holds
the table). The model is built once per rule set and kept in the cache (:mod:`core.cache`);
nothing of it is made until the first unrecognised error of a run.
"""

from __future__ import annotations

import dataclasses
import marshal
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ascend_doctor.core import cache, regex
from ascend_doctor.core.events import Category, Finding
from ascend_doctor.rules.loader import Rule, RuleSet
from ascend_doctor.rules.parse import parse
from ascend_doctor.rules.unrecognised import Unit

UNRECOGNISED = "unrecognised"
PREFIX = "inferred:"
"""The rule of an inferred finding is this prefix and the category it names (rules/ranking.py
knows it as ``INFERRED``: the engine's import does not load the ranking)."""
THRESHOLD = 0.985
"""Confidence a guess needs to be kept (bench/infer_cv.py: max right - 2 x (wrong + false)
over its thresholds, with ``EVIDENCE`` and ``ALPHA`` as they are). With ``BACKGROUND`` the
table's maximum is 0.97 (173 against 169 here, from 28 more right, 11 more wrong and one more
false inference); it stays at 0.985, since a lower threshold names a family for more of the
errors that have none (the weakest class of the held-out part)."""
ALPHA = 0.5
"""Laplace smoothing of the token counts (bench/infer_cv.py: 0.25 and 1.0 score lower)."""
BACKGROUND = 0.05
"""The unrecognised class counts, besides its own documents, the tokens of every other class
times this weight: a faint background of error text in general. Its own documents are few
(the units of the packs' ``no_match`` lines), so without it nearly every word of the
vocabulary is at the smoothing floor there, and any word an error shares with a family
("invalid", "shape", "tiling", "check", "failed") counts for that family against
unrecognised: an EZ9999 block of a tiling check no rule knows (d-1160, vllm-ascend #2732) was
inferred env_mismatch from "bin, invalid, match, workspace". With it, a word is evidence for a
family only as far as the family uses it more than error text at large. bench/infer_cv.py at
0.985: 169 (right 273, wrong 44, false 8, none on a development line labelled unrecognised)
against 160 without (286 / 54 / 9, one); 0.02 to 0.05 score 169-173 at their best thresholds,
0.1 161, 0.25 154, 1.0 144 (the rules' own examples, which share their family's common words,
are then inferred less)."""
EVIDENCE = 4.0
"""The ``n`` known tokens of a text weigh as ``EVIDENCE * sqrt(n)`` independent ones. Naive
Bayes adds every token's log-likelihood as if each were independent evidence, but the words
of an error are not: a template's words come together, a compound name comes with its parts,
a CANN block repeats its module's vocabulary. Summed as independent, a long block gets a
posterior of 0.99999 for whichever family it resembles most while a short exception line
barely passes any threshold, so one threshold cannot tell right guesses from wrong ones. The
summed log-likelihoods are scaled by ``EVIDENCE / sqrt(n)`` before the posterior: the ranking
of the classes for one text is unchanged, its confidence grows with the mean evidence per
token and with the square root of their number (bench/infer_cv.py: exponents 0.4 to 0.7 of
``n`` scored alike, 0 and 1 lower; ``EVIDENCE`` 3 to 5 score alike at their best thresholds)."""
MIN_TOKENS = 5
"""Fewer known tokens than this are never enough to name a family: four words weigh as eight
(``EVIDENCE / sqrt(4)``), enough to name one for another server's ``Engine loop failed`` or a
driver's ``session close failed`` (lines of the unrecognised pass's tests, of no family the
doctor remediates). bench/infer_cv.py holds few such short negatives: it scores 190 with no
floor, 187 with 4 (one false inference fewer), 183 with 5 and 168 with 6."""

_WORD = regex.compile(r"[A-Za-z][A-Za-z0-9]*")
_CAMEL = regex.compile(r"[A-Z]{2,}(?=[A-Z][a-z]|\d|$)|[A-Z]?[a-z]+|[A-Z]+|\d+")
_CANN = regex.compile(r"\b(E[0-9A-Z])(\d{4})\b")
_HEX = frozenset("0123456789abcdef")
MAX_TEXT = 2000
"""Characters of a unit's text the classifier reads."""


def tokens(text: str) -> frozenset[str]:
    """The features of ``text``: each line's message (its logging header left out), as
    lower-case words and the parts of compound names, and CANN code prefixes."""
    out: set[str] = set()
    for line in text[:MAX_TEXT].split("\n"):
        raw = line.encode("utf-8", "replace")
        msg = raw[parse(raw).message :].decode("utf-8", "replace")
        for m in _CANN.finditer(msg):
            out.add("code:" + m.group(1))
        for m in _WORD.finditer(msg):
            word = m.group(0)
            low = word.lower()
            if len(low) >= 2 and not (len(low) >= 6 and set(low) <= _HEX):
                out.add(low)
            if low != word and not word.isupper():
                for part in _CAMEL.findall(word):
                    if len(part) >= 2 and not part.isdigit():
                        out.add(part.lower())
    return frozenset(out)


def unit_text(data: bytes, unit: Unit) -> str:
    """What the classifier reads of an error unit: a traceback's exception line, or every
    line of a CANN block or a lone error line, as text."""
    first = unit.key_line if unit.last == unit.key_line else unit.first
    end = data.find(b"\n", unit.last)
    raw = data[first : end if end >= 0 else len(data)][: MAX_TEXT * 2]
    return raw.decode("utf-8", "replace")


def train_docs(rules: Iterable[Rule]) -> list[tuple[str, str, frozenset[str]]]:
    """(rule id, category, tokens) of every ``match`` example of every text rule."""
    return [
        (r.id, r.category.value, tokens(line))
        for r in rules
        for line in r.examples.get("match", ())
    ]


@dataclass(frozen=True)
class Guess:
    """What the classifier says of one text."""

    category: str
    """The most likely class (``unrecognised`` included)."""
    confidence: float
    """Its posterior probability, the tokens' evidence weighed as ``EVIDENCE`` says."""
    why: tuple[str, ...]
    """The tokens that weigh most for it against the runner-up."""


@dataclass(frozen=True)
class Model:
    """Log-probabilities of each token per class (uniform class prior), and the token sets of
    the unrecognised class's documents."""

    classes: tuple[str, ...]
    logp: dict[str, tuple[float, ...]]
    """token -> log P(token | class), per class in ``classes`` order."""
    unseen: tuple[float, ...]
    """log P of a token of the vocabulary never seen in a class."""
    negatives: frozenset[frozenset[str]] = frozenset()
    """The tokens of each document of the unrecognised class: a text of exactly these tokens
    is unrecognised, whatever the smoothed counts say (a rule's ``no_match`` example, which
    the pack says outright is not that rule's, can otherwise be outvoted by its family's
    common words: ``KeyError: 'model.layers.3.mlp'`` by model_config_error's "model")."""

    @classmethod
    def fit(
        cls,
        docs: Iterable[tuple[str, frozenset[str]]],
        alpha: float = 0.5,
        background: float = BACKGROUND,
    ) -> Model:
        """Train on (class, tokens) documents; the unrecognised class also counts the tokens
        of every other class times ``background`` (``BACKGROUND``)."""
        counts: dict[str, Counter[str]] = {}
        negatives: set[frozenset[str]] = set()
        for label, toks in docs:
            counts.setdefault(label, Counter()).update(toks)
            if label == UNRECOGNISED:
                negatives.add(toks)
        weights: dict[str, dict[str, float]] = {c: dict(n) for c, n in counts.items()}
        if background > 0 and counts:
            own = weights.setdefault(UNRECOGNISED, {})
            for label, n in counts.items():
                if label != UNRECOGNISED:
                    for t, k in n.items():
                        own[t] = own.get(t, 0.0) + k * background
        classes = tuple(sorted(weights))
        vocab = sorted(set().union(*weights.values())) if weights else []
        v = len(vocab)
        totals = [sum(weights[c].values()) + alpha * v for c in classes]
        logp = {
            t: tuple(
                math.log((weights[c].get(t, 0.0) + alpha) / totals[i])
                for i, c in enumerate(classes)
            )
            for t in vocab
        }
        unseen = tuple(math.log(alpha / total) for total in totals)
        return cls(classes, logp, unseen, frozenset(negatives))

    def predict(
        self,
        text: str | frozenset[str],
        evidence: float | None = EVIDENCE,
        least: int = MIN_TOKENS,
    ) -> Guess:
        """The most likely class of ``text`` (or its tokens) and its posterior, the summed
        log-likelihoods of its ``n`` known tokens scaled by ``evidence / sqrt(n)`` (None: the
        plain naive Bayes posterior, every token independent evidence); unrecognised with
        confidence 0 below ``least`` known tokens."""
        toks = tokens(text) if isinstance(text, str) else text
        known = [t for t in toks if t in self.logp]
        if len(known) < max(least, 1) or not self.classes or toks in self.negatives:
            return Guess(UNRECOGNISED, 0.0, ())
        scores = [0.0] * len(self.classes)
        for t in known:
            for i, lp in enumerate(self.logp[t]):
                scores[i] += lp
        if evidence is not None:
            weight = evidence / math.sqrt(len(known))
            scores = [s * weight for s in scores]
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        best = max(range(len(scores)), key=scores.__getitem__)
        second = max(
            (i for i in range(len(scores)) if i != best), key=scores.__getitem__, default=best
        )
        why = sorted(
            (t for t in known if self.logp[t][best] > self.logp[t][second]),
            key=lambda t: (self.logp[t][second] - self.logp[t][best], t),
        )[:4]
        return Guess(self.classes[best], weights[best] / sum(weights), tuple(why))

    def dump(self) -> bytes:
        """The model as the cache holds it."""
        vocab = sorted(self.logp)
        negatives = sorted(sorted(n) for n in self.negatives)
        rows = [self.logp[t] for t in vocab]
        return marshal.dumps((self.classes, vocab, rows, self.unseen, negatives))

    @classmethod
    def load(cls, blob: bytes) -> Model | None:
        """A model from :meth:`dump`'s bytes, or None when they are not one."""
        try:
            classes, vocab, rows, unseen, negatives = marshal.loads(blob)
            model = cls(
                tuple(classes),
                dict(zip(vocab, rows, strict=True)),
                tuple(unseen),
                frozenset(frozenset(n) for n in negatives),
            )
        except (ValueError, TypeError, EOFError):
            return None
        n = len(model.classes)
        if len(model.unseen) != n or any(len(r) != n for r in model.logp.values()):
            return None
        if any(c != UNRECOGNISED and c not in _CATEGORIES for c in model.classes):
            return None
        return model


_CATEGORIES = frozenset(c.value for c in Category)


def kind_of(rule: Rule) -> str:
    """The stream a rule's examples are read as: the server's when it reads it."""
    return "server" if "server" in rule.sources else rule.sources[0]


Negatives = Callable[[], list[str]]
"""The unit texts of the unrecognised class (the engine scans the ``no_match`` examples)."""

_NAMESPACE = "infer"
_MEMO: dict[int, tuple[RuleSet, Model]] = {}
_CODE = ("infer.py", "engine.py", "findings.py", "unrecognised.py", "parse.py", "blocks.py")


def model_for(rules: RuleSet, negatives: Negatives) -> Model:
    """The model of ``rules``: once per process and rule set, from the cache when it holds
    it. The key names every rule's id, category, sources, pattern and examples, the code
    that reads a unit and the catalogue files (a code may explain a ``no_match`` line)."""
    memo = _MEMO.get(id(rules))
    if memo is not None and memo[0] is rules:
        return memo[1]
    key = None
    try:
        here = Path(__file__).parent
        files = [here / name for name in _CODE]
        files += sorted((here / "catalogues").glob("*.yaml"))
        files += sorted(p for d in rules.catalogue_dirs for p in d.glob("*.yaml"))
        key = cache.key_of(
            "infer-1",
            sys.version,
            str(ALPHA),
            *(part for p in files for part in (p.name, p.read_bytes())),
            *(
                "\0".join(
                    (
                        r.id,
                        r.category.value,
                        ",".join(r.sources),
                        r.pattern,
                        *r.examples["match"],
                        "\1",
                        *r.examples.get("no_match", ()),
                    )
                )
                for r in rules.text
            ),
        )
    except OSError:
        pass
    model = None
    if key is not None and (blob := cache.read(_NAMESPACE, key)) is not None:
        model = Model.load(blob)
    if model is None:
        docs = [(c, toks) for _, c, toks in train_docs(rules.text)]
        docs += [(UNRECOGNISED, tokens(t)) for t in negatives()]
        model = Model.fit(docs, alpha=ALPHA)
        if key is not None:
            cache.write(_NAMESPACE, key, model.dump(), keep=4)
    if len(_MEMO) >= 8:
        _MEMO.clear()
    _MEMO[id(rules)] = (rules, model)
    return model


def is_inferred(finding: Finding) -> bool:
    """A finding whose category the classifier inferred (no rule or code gave it)."""
    return finding.rule.startswith(PREFIX)


def summary_of(captures: dict[str, str]) -> str:
    """An inferred finding's summary: the likely category, the tokens it was inferred from
    and the error's template."""
    return (
        f"likely {captures['inferred']}, inferred from: {captures['inferred_from']}:"
        f" {captures['template']}"
    )


EXPLAIN = (
    "No rule or code catalogue explains this error; its words resemble the rules of the "
    "category named, so it is probably of that family. An inference, not a diagnosis: check "
    "it against the explanation of that family. No remediation is ever planned from it and "
    "the doctor files it as an unrecognised error."
)


def infer(finding: Finding, model: Model, text: str) -> Finding:
    """``finding`` (unrecognised) as an inferred finding of the category ``model`` gives
    ``text`` when its posterior reaches ``THRESHOLD``; else unchanged."""
    guess = model.predict(text)
    if guess.category == UNRECOGNISED or guess.confidence < THRESHOLD:
        return finding
    captures = {
        **finding.captures,
        "inferred": guess.category,
        "inferred_from": ", ".join(guess.why),
        "confidence": f"{guess.confidence:.3f}",
    }
    return dataclasses.replace(
        finding,
        rule=PREFIX + guess.category,
        category=Category(guess.category),
        summary=summary_of(captures),
        captures=captures,
        remediation=(),
        explain=EXPLAIN,
    )


def as_unrecognised(finding: Finding) -> Finding:
    """An inferred finding as the doctor files it: of category ``unrecognised`` (never
    remediated, paged only as an unrecognised error), its summary still naming the likely
    family; any other finding unchanged."""
    if not is_inferred(finding):
        return finding
    return dataclasses.replace(finding, category=Category.UNRECOGNISED, remediation=())


__all__ = [
    "ALPHA",
    "EVIDENCE",
    "MIN_TOKENS",
    "PREFIX",
    "THRESHOLD",
    "UNRECOGNISED",
    "Guess",
    "Model",
    "as_unrecognised",
    "infer",
    "is_inferred",
    "kind_of",
    "model_for",
    "summary_of",
    "tokens",
    "train_docs",
    "unit_text",
]
