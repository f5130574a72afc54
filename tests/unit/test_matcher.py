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


PLACES = {
    "alone": "{}\n",
    "after a line": "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] hi\n{}\nnext\n",
    "before blank lines": "x\n{}\n\n\nz\n",
    "with CRLF line ends": "x\r\n{}\r\nz\r\n",
    "with trailing blanks": "x\n{} \t\nz\n",
}


@pytest.mark.parametrize("place", sorted(PLACES))
def test_every_match_example_is_found_wherever_its_line_is(place: str) -> None:
    # a rule's ^ and $ are a line's start and end (rules/loader.py RULE_FLAGS): without it a
    # pattern ending in $ found its line only at the end of a chunk, on both paths
    missed = []
    for rule in RULES.text:
        source = sorted(rule.sources)[0]
        for example in rule.examples.get("match", ()):
            if "\n" in example:
                continue
            text = PLACES[place].format(example).encode()
            for engine in (RE, HS):
                chunk = LogChunk("x.log", source, 0, text, first_line=1)
                if not any(f.rule == rule.id for f in engine.scan(chunk)):
                    missed.append((rule.id, engine.matcher, example[:80]))
    assert missed == []


POSTED = [
    "[rank0]: ",
    "(Worker_TP0 pid=1234) ",
    "[rank0]: (EngineCore_DP0 pid=812) ",
    "2026-12-01T10:00:00.123456789Z stderr F ",  # kubelet / CRI
    "vllm-1  | ",  # docker compose
    "[pod/vllm-0/vllm] ",  # kubectl logs --prefix
    "Dec  7 12:00:00 host vllm[1234]: ",  # a systemd unit's output read back with journalctl
]


def test_every_server_example_is_found_with_the_prefixes_logs_are_posted_with() -> None:
    missed = []
    for rule in RULES.text:
        if "server" not in rule.sources:
            continue
        for example in rule.examples.get("match", ()):
            if "\n" in example:
                continue
            for prefix in POSTED:
                chunk = LogChunk("x.log", "server", 0, (prefix + example + "\n").encode(), 1)
                if not any(f.rule == rule.id for f in HS.scan(chunk)):
                    missed.append((rule.id, prefix, example[:80]))
    assert missed == []
