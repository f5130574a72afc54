"""No rule proposes the lines of a healthy server (issue 18): a rule whose hyperscan prefix is
only a header (`HCCL(pid,proc):` before a keyword) proposed every HCCL INFO line, and its
regex then ran on each one (a 600 MB benign scan went from 0.6 to 8.6 s). Counted, not timed:
on the benchmark's benign lines every rule proposes at most one line in a hundred."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from ascend_doctor.rules import Engine, load_rules

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("matcher", ["hyperscan", "re"])
def test_no_rule_proposes_benign_lines(matcher: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if matcher == "hyperscan":
        pytest.importorskip("hyperscan")
    monkeypatch.syspath_prepend(str(BENCH))
    from common import SCAN_BENIGN

    lines = [t.format(s=i % 60, n=1000 + i) for i in range(40) for t in SCAN_BENIGN]
    data = ("\n".join(lines) + "\n").encode()
    engine = Engine(load_rules(), matcher=matcher, clock=lambda: 0.0)
    rules = engine._by_source["server"]
    proposed = collections.Counter(
        rules[i].id for i, _ in engine._prefilters["server"].candidates(data) if i < len(rules)
    )
    busy = {rule: n for rule, n in proposed.items() if n > len(lines) // 100}
    assert not busy, f"rules proposing many of {len(lines)} benign lines: {busy}"
