"""core.regex: patterns compiled from the on-disk table behave as ``re.compile``'s (issue 18)."""

from __future__ import annotations

import marshal
import os
import re
from pathlib import Path

import pytest

from ascend_doctor.core import cache, regex
from ascend_doctor.rules import load_rules


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache and a table not loaded yet."""
    d = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV, str(d))
    monkeypatch.setattr(regex, "_table", None)
    monkeypatch.setattr(regex, "_added", 0)
    monkeypatch.setattr(regex, "_owner", 0)
    return d


def _reload(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the next process sees: the table written back, read again."""
    regex._save()
    monkeypatch.setattr(regex, "_table", None)
    monkeypatch.setattr(regex, "_added", 0)


def _same(a: re.Pattern[bytes], b: re.Pattern[bytes], texts: list[bytes]) -> None:
    assert (a.pattern, a.flags, a.groups, a.groupindex) == (
        b.pattern,
        b.flags,
        b.groups,
        b.groupindex,
    )
    for t in texts:
        ma, mb = a.search(t), b.search(t)
        assert (ma is None) == (mb is None), (a.pattern, t)
        if ma is not None and mb is not None:
            assert (ma.span(), ma.groupdict(), ma.groups()) == (
                mb.span(),
                mb.groupdict(),
                mb.groups(),
            )


def test_every_rule_pattern_from_the_table_matches_its_examples_as_re_compile(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = load_rules().text
    assert len(rules) > 200
    for rule in rules:
        regex.compile(rule.pattern.encode())
    assert regex._added >= len({r.pattern for r in rules})
    _reload(monkeypatch)
    table = regex._load()
    for rule in rules:
        assert (rule.pattern.encode(), 0) in table
        texts = [
            e.encode()
            for e in (*rule.examples.get("match", ()), *rule.examples.get("no_match", ()))
        ]
        _same(regex.compile(rule.pattern.encode()), re.compile(rule.pattern.encode()), texts)
    assert regex._added == 0  # every one came from the table


def test_flags_named_groups_and_str_patterns_round_trip(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases: list[tuple[str | bytes, int]] = [
        (r"(?P<code>E[0-9A-Z]\d{4})\s*:\s*(?P<msg>.*)", 0),
        (r"^error\b.*$", re.I | re.M),
        (rb"(?x) ret \s* = \s* (?P<ret>-?\d+)  # a comment", 0),
        (r"é+\w", 0),
        (r"é+\w", re.ASCII),
    ]
    for p, f in cases:
        regex.compile(p, f)
    _reload(monkeypatch)
    for p, f in cases:
        got, want = regex.compile(p, f), re.compile(p, f)
        assert (got.pattern, got.flags, got.groups, got.groupindex) == (
            want.pattern,
            want.flags,
            want.groups,
            want.groupindex,
        )
        sample = (
            "EZ9999: Inner Error\nERROR here\nret = -7\néé\u00e9x"
            if isinstance(p, str)
            else b"ret = 507035"
        )
        assert [m.span() for m in got.finditer(sample)] == [m.span() for m in want.finditer(sample)]  # type: ignore[arg-type]
    assert regex._added == 0


def test_a_bad_pattern_raises_as_re_compile_does(fresh: Path) -> None:
    with pytest.raises(re.error):
        regex.compile(r"(unclosed")


def test_bogus_opcodes_in_a_valid_file_are_compiled_again(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table whose digest holds but whose opcodes are wrong (another build, a hostile
    writer): ``_sre`` rejects them and the pattern is compiled from its text."""
    regex.compile(r"abc(?P<x>\d+)")
    _reload(monkeypatch)
    table = regex._load()
    flags, code, groups, gi, ig = table[(r"abc(?P<x>\d+)", 0)]
    table[(r"abc(?P<x>\d+)", 0)] = (flags, b"\xff\xff\xff\x7f" * (len(code) // 4), groups, gi, ig)
    got = regex.compile(r"abc(?P<x>\d+)")
    m = got.search("zzabc123")
    assert m is not None and m.group("x") == "123"


def test_a_foreign_or_corrupt_table_is_ignored(
    fresh: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for payload in (b"not marshal", marshal.dumps(["a", "list"]), marshal.dumps({("a", 0): "x"})):
        cache.write("regex", regex._key(), payload)
        monkeypatch.setattr(regex, "_table", None)
        assert regex.compile(r"a+b").fullmatch("aab") is not None
        assert regex._load() == {("a+b", 0): regex._load()[("a+b", 0)]}


def test_the_cache_turned_off_still_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cache.ENV, "off")
    monkeypatch.setattr(regex, "_table", None)
    assert regex.compile(rb"x(\d)").search(b"ax7") is not None
    regex._save()  # nothing to write to, nothing raised


def test_a_forked_child_does_not_write_the_table(fresh: Path) -> None:
    regex.compile(r"learnt in the parent \d")
    pid = os.fork()
    if pid == 0:  # the child learns a pattern and exits through atexit's path
        regex.compile(r"learnt in the child \d")
        regex._save()
        os._exit(0)
    os.waitpid(pid, 0)
    assert not list(fresh.rglob("*.bin"))
    regex._save()
    assert len(list(fresh.rglob("*.bin"))) == 1


def test_learn_adds_what_the_table_lacks_and_nothing_twice(fresh: Path) -> None:
    regex.compile(rb"known (\d+)")
    regex.learn([rb"known (\d+)", rb"new (\w+)", rb"(unclosed"])
    table = regex._load()
    assert (rb"new (\w+)", 0) in table and (rb"(unclosed", 0) not in table
    assert regex._added == 2
