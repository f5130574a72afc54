"""Rules can't hang the daemon: a pattern that backtracks without bound is refused at start-up
(watch and every command that loads rules, not only ``rules lint``), and what a safe pattern
searches is capped per line on both matching paths, so a hostile line costs what its first
32 KiB cost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ascend_doctor.core.errors import RuleError
from ascend_doctor.core.events import LogChunk
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules.matcher import MAX_LINE, RePrefilter, capped

RULE = """rules:
  - id: {rid}
    category: npu_oom
    severity: error
    source: server
    summary: site rule
    explain: e
    pattern: '{pattern}'
    examples: {{match: ['{example}']}}
"""

UNSAFE = [
    ("site-nested", "(a+)+b", "aab", "nested unbounded quantifiers"),
    ("site-alternatives", "(?:a|aa)*b", "aab", "alternatives that can match the same text"),
    ("site-backref", "(x)\\1 oom", "xx oom", "backreference"),
    ("site-leading", "\\S+ has no config", "m has no config", "begins with an unbounded repeat"),
]


def _site(tmp_path: Path, rid: str, pattern: str, example: str) -> Path:
    d = tmp_path / "site"
    d.mkdir(exist_ok=True)
    (d / "risky.yaml").write_text(RULE.format(rid=rid, pattern=pattern, example=example))
    return d


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ascend_doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(("rid", "pattern", "example", "why"), UNSAFE)
def test_an_unsafe_site_pattern_stops_the_load_with_file_line_and_why(
    tmp_path: Path, rid: str, pattern: str, example: str, why: str
) -> None:
    site = _site(tmp_path, rid, pattern, example)
    with pytest.raises(RuleError) as exc:
        load_rules([site])
    assert f"risky.yaml:2: rule '{rid}' pattern is unsafe on untrusted lines" in str(exc.value)
    assert why in str(exc.value)
    # rules lint still names it (with every other problem) rather than stopping at the first
    lint = doctor("rules", "lint", str(site))
    assert lint.returncode == 1 and rid in lint.stderr and why in lint.stderr


def test_watch_with_an_unsafe_site_rule_refuses_to_start(tmp_path: Path) -> None:
    site = _site(tmp_path, "site-alternatives", "(?:a|aa)*b", "aab")
    config = tmp_path / "doctor.toml"
    config.write_text(f'[rules]\ndirs = ["{site}"]\n')
    marker = tmp_path / "server-started"
    out = doctor(
        "watch",
        "--config",
        str(config),
        "--state-dir",
        str(tmp_path / "state"),
        "--",
        sys.executable,
        "-c",
        f"open({str(marker)!r}, 'w')",
    )
    assert out.returncode != 0
    assert "risky.yaml:2: rule 'site-alternatives'" in out.stderr
    assert "Traceback" not in out.stderr
    assert not marker.exists()  # refused before anything was started


def test_capped_keeps_offsets_and_cuts_only_overlong_lines() -> None:
    short = b"ERROR short line\n"
    long = b"a" * (MAX_LINE + 100)
    data = short + long + b"\ntail\n"
    out = capped(data)
    assert len(out) == len(data)
    assert out.startswith(short + b"a" * MAX_LINE + b"\n")
    assert out.endswith(b"\n" * 100 + b"\ntail\n")
    assert capped(short) is short  # nothing long: the same bytes, no copy


@pytest.mark.parametrize("matcher", ["re", "hyperscan"])
def test_a_safe_pattern_searches_at_most_the_cap_of_a_hostile_line(
    tmp_path: Path, matcher: str
) -> None:
    """``A[^\\n]*Z`` passes the lint but costs the square of what it searches, so each line is
    searched only to the cap: a 256 KiB line is read no further than its first 32 KiB, a
    match past the cap is not seen (on both paths alike), one inside it is. (A line of 32 KiB
    of ``A`` costs the re path about half a second, which is why the cap is there: the test
    does not pay it.)"""
    if matcher == "hyperscan":
        pytest.importorskip("hyperscan")
    site = _site(tmp_path, "site-a-to-z", "A[^\\n]*Z", "A then Z")
    engine = Engine(load_rules([site]), matcher=matcher, clock=lambda: 0.0)
    hostile = b"A" + b"x" * (256 * 1024)
    inside = b"A" + b"x" * 100 + b"Z"
    past = b"A" + b"x" * MAX_LINE + b"Z"
    data = b"\n".join([hostile, past, inside]) + b"\n"
    found = [f for f in engine.scan(LogChunk("f", "server", 0, data)) if f.rule == "site-a-to-z"]
    assert [f.offset for f in found] == [len(hostile) + 1 + len(past) + 1]


def test_the_re_prefilter_searches_no_further_than_the_cap() -> None:
    """Without hyperscan (the fallback) each rule's regex runs over the whole chunk: it sees
    the chunk capped, so a 256 KiB line costs what its first 32 KiB cost."""
    (rule,) = [r for r in load_rules().text if r.id == "torch-npu-oom"]
    line = b"x" * MAX_LINE + b" RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB"
    assert RePrefilter([rule]).candidates(line + b"\n") == []
    assert RePrefilter([rule]).candidates(line[MAX_LINE:] + b"\n") == [(0, 0)]
