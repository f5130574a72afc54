"""rules lint: unsafe patterns and bad catalogues are named."""

import pytest

from ascend_doctor.rules import load_rules
from ascend_doctor.rules.lint import catalogue_problems, pattern_problems, rule_problems


@pytest.mark.parametrize("pattern", [r"(a+)+", r"(?:\s*\w+)*x", r"(?:a|b+)*c", r"(?:x[^\n]*)+y"])
def test_nested_unbounded_quantifiers_are_refused(pattern: str) -> None:
    assert any("nested unbounded" in p for p in pattern_problems(pattern))


@pytest.mark.parametrize("pattern", [r"(?P<x>a)(?P=x)", r"(a)\1"])
def test_backreferences_are_refused(pattern: str) -> None:
    assert any("backreference" in p for p in pattern_problems(pattern))


@pytest.mark.parametrize(
    "pattern",
    [
        r"\S+ does not",
        r"[^\n]*?z",
        r"(?:To x)?\(?(?P<g>[\d.]+) GiB",
        r"x?\d*y",
        r"(?=a)\w+b",
        r"(?=\S+ foo)bar",
    ],
)
def test_a_leading_unbounded_repeat_is_refused(pattern: str) -> None:
    """Searched at every byte of a run, it reads the run to its end each time."""
    assert any("begins with an unbounded repeat" in p for p in pattern_problems(pattern))


@pytest.mark.parametrize(
    "pattern",
    [
        r"a{1,5}b+",
        r"c(?:ab)+d",
        r"x{1,4}(?:y+){0,3}",
        r"x[^\n]*?z",
        r"\S{1,400} does not",
        r"^\S+ foo",
        r"(?:^|\s)\d+ Segmentation",
        r"(?<=\[)E\d+ x",
        r"(?=foo)foo \S+",
    ],
)
def test_safe_patterns_pass(pattern: str) -> None:
    assert pattern_problems(pattern) == []


def test_shipped_rules_and_catalogues_are_clean() -> None:
    assert rule_problems(load_rules().text) == []
    assert catalogue_problems() == []
