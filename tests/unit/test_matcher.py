"""The hyperscan and Python-re paths give identical findings (property test)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_doctor.core.events import LogChunk
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules.matcher import hyperscan_error

pytest.importorskip("hyperscan")

RULES = load_rules()
RE = Engine(RULES, matcher="re", clock=lambda: 0.0)
HS = Engine(RULES, matcher="hyperscan", clock=lambda: 0.0)
EXAMPLES = sorted(
    {line for r in RULES.text for k in ("match", "no_match") for line in r.examples.get(k, ())}
)
PREFIXES = [
    "",
    "[rank0]: ",
    "(EngineCore_DP0 pid=276) ERROR 09-08 02:55:31 [core.py:702] ",
    "(Worker_DP0_TP1_EP1 pid=1210) ",
    "(APIServer pid=728) INFO 09-08 02:55:31 [api_server.py:1885] ",
]
SOURCES = sorted({s for r in RULES.text for s in r.sources})


def key(engine: Engine, chunk: LogChunk) -> list[tuple[object, ...]]:
    return [
        (f.rule, f.offset, tuple(sorted(f.captures.items())), tuple(e.text for e in f.evidence))
        for f in engine.scan(chunk)
    ]


line = st.one_of(
    st.tuples(st.sampled_from(PREFIXES), st.sampled_from(EXAMPLES)).map("".join),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80),
    st.sampled_from(EXAMPLES).map(lambda s: s[: len(s) // 2]),
    st.tuples(st.sampled_from(EXAMPLES), st.integers(0, 200)).map(
        lambda t: t[0][: t[1]] + "\n" + t[0][t[1] :]
    ),
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(line, min_size=1, max_size=25), source=st.sampled_from(SOURCES))
def test_both_paths_give_identical_findings(lines: list[str], source: str) -> None:
    chunk = LogChunk("x.log", source, 100, ("\n".join(lines) + "\n").encode(), first_line=1)
    assert key(RE, chunk) == key(HS, chunk)


def test_every_example_through_both_paths() -> None:
    for rule in RULES.text:
        for source in rule.sources:
            for text in rule.examples["match"]:
                chunk = LogChunk("x.log", source, 0, (text + "\n").encode())
                for engine in (RE, HS):
                    assert rule.id in [f.rule for f in engine.scan(chunk)], (engine.matcher, text)


def test_every_shipped_pattern_compiles_in_hyperscan() -> None:
    assert {
        r.id: hyperscan_error(r.pattern) for r in RULES.text if hyperscan_error(r.pattern)
    } == {}
    assert HS.matcher == "hyperscan"


@pytest.mark.parametrize(
    "text",
    [
        "MemoryError\n\n",  # hypothesis found it: re's candidate was the blank line after it
        "x\nMemoryError\nfoo\n",  # at the start of a line that is not the chunk's first
        "MemoryError  \n\nMemoryError: x\n",
    ],
)
def test_a_line_ending_a_pattern_is_found_on_both_paths_wherever_it_is(text: str) -> None:
    chunk = LogChunk("x.log", "server", 0, text.encode(), first_line=1)
    found = key(HS, chunk)
    assert found == key(RE, chunk)
    assert sum("host-memory-allocation-failed" in str(k) for k in found) == text.count(
        "MemoryError"
    )
