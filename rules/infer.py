"""The likely family of an error no rule explains, inferred from its words (issue 14).

A multinomial naive Bayes classifier over the tokens of an error unit (lower-cased words,
the parts of a CamelCase or snake_case name, CANN error-code prefixes such as ``EI`` or
``EJ``), trained on the loaded rules' own ``examples: match`` lines, each labelled with its
rule's category, and an ``unrecognised`` class. Pure: no I/O. ``bench/infer_cv.py``
measures it by leave-one-rule-out cross-validation on the development data.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ascend_doctor.core import regex
from ascend_doctor.rules.loader import Rule
from ascend_doctor.rules.parse import parse
from ascend_doctor.rules.unrecognised import Unit

UNRECOGNISED = "unrecognised"

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
    """Its posterior probability."""
    why: tuple[str, ...]
    """The tokens that weigh most for it against the runner-up."""


@dataclass(frozen=True)
class Model:
    """Log-probabilities of each token per class (uniform class prior)."""

    classes: tuple[str, ...]
    logp: dict[str, tuple[float, ...]]
    """token -> log P(token | class), per class in ``classes`` order."""
    unseen: tuple[float, ...]
    """log P of a token of the vocabulary never seen in a class."""

    @classmethod
    def fit(cls, docs: Iterable[tuple[str, frozenset[str]]], alpha: float = 0.5) -> Model:
        """Train on (class, tokens) documents."""
        counts: dict[str, Counter[str]] = {}
        for label, toks in docs:
            counts.setdefault(label, Counter()).update(toks)
        classes = tuple(sorted(counts))
        vocab = sorted(set().union(*counts.values())) if counts else []
        v = len(vocab)
        totals = [sum(counts[c].values()) + alpha * v for c in classes]
        logp = {
            t: tuple(math.log((counts[c][t] + alpha) / totals[i]) for i, c in enumerate(classes))
            for t in vocab
        }
        unseen = tuple(math.log(alpha / total) for total in totals)
        return cls(classes, logp, unseen)

    def predict(self, text: str | frozenset[str]) -> Guess:
        """The most likely class of ``text`` (or its tokens) and its posterior."""
        toks = tokens(text) if isinstance(text, str) else text
        known = [t for t in toks if t in self.logp]
        if not known or not self.classes:
            return Guess(UNRECOGNISED, 0.0, ())
        scores = [0.0] * len(self.classes)
        for t in known:
            for i, lp in enumerate(self.logp[t]):
                scores[i] += lp
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


__all__ = ["UNRECOGNISED", "Guess", "Model", "tokens", "train_docs", "unit_text"]
