"""Start-up (issue 18): the cache of parsed packs and compiled databases, libyaml, and what a
command imports. Every cached thing must give what building it gives, and a bad cache must
never stop the doctor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ascend_doctor.core import cache
from ascend_doctor.core.errors import RuleError
from ascend_doctor.core.events import LogChunk
from ascend_doctor.rules import Engine, load_rules
from ascend_doctor.rules.catalogue import builtin_catalogue_dir
from ascend_doctor.rules.loader import builtin_pack_dir
from ascend_doctor.rules.yamlload import _loaders, load_yaml

SHIPPED = sorted(builtin_pack_dir().glob("*.yaml")) + sorted(builtin_catalogue_dir().glob("*.yaml"))
FIXTURE = Path(__file__).parent.parent / "fixtures" / "incidents" / "oom-engine-dead.log"


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV, str(d))
    return d


def test_libyaml_reads_every_shipped_file_as_the_python_parser_does(cache_dir: Path) -> None:
    if not hasattr(yaml, "CSafeLoader"):
        pytest.skip("PyYAML without libyaml")
    for path in SHIPPED:
        expected = yaml.load(path.read_text(encoding="utf-8"), Loader=_loaders()[2])
        assert load_yaml(path) == expected, path.name  # parsed by libyaml, then cached
        assert load_yaml(path) == expected, path.name  # read back from the cache
    assert len(list((cache_dir / "yaml").glob("*.bin"))) == len(SHIPPED)


def test_a_changed_pack_is_parsed_again(cache_dir: Path, tmp_path: Path) -> None:
    pack = tmp_path / "site.yaml"
    pack.write_text("rules:\n  - id: a\n", encoding="utf-8")
    assert load_yaml(pack)["rules"][0]["id"] == "a"
    pack.write_text("rules:\n  - id: b\n", encoding="utf-8")
    assert load_yaml(pack)["rules"][0]["id"] == "b"


def test_patterns_compile_when_used_and_a_changed_one_is_checked_again(
    cache_dir: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    rule = (
        "rules:\n  - id: mine\n    category: npu_oom\n    severity: error\n"
        "    source: server\n    pattern: '{}'\n    summary: s\n    examples: {{match: [x]}}\n"
    )
    (site / "a.yaml").write_text(rule.format("frob(?P<n>\\d+)"), encoding="utf-8")
    first = load_rules([site])
    assert "regex" in vars(next(r for r in first.text if r.id == "mine"))  # checked: compiled
    again = next(r for r in load_rules([site]).text if r.id == "mine")
    assert "regex" not in vars(again)  # the same patterns compiled before: not yet
    assert again.regex.search(b"frob12").group("n") == b"12"  # compiled when first used
    (site / "a.yaml").write_text(rule.format("frob(?P<n>\\d+"), encoding="utf-8")
    with pytest.raises(RuleError, match=r"a\.yaml:2: rule 'mine' pattern does not compile"):
        load_rules([site])


def test_a_bad_pack_names_file_and_line_with_libyaml_too(cache_dir: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "bad.yaml").write_text("rules:\n  - id: x\n    pattern: [unclosed\n", encoding="utf-8")
    with pytest.raises(RuleError, match=r"(?s)bad\.yaml: cannot load rules: .*line 3, column 14"):
        load_rules([site])


def _engine() -> Engine:
    """An engine built from the cache as a new process builds it (the shipped catalogues
    are otherwise read once per process)."""
    from ascend_doctor.rules import catalogue

    catalogue._builtin.cache_clear()
    return Engine(load_rules(), clock=lambda: 0.0)


def test_corrupt_truncated_or_foreign_cache_files_are_rebuilt(cache_dir: Path) -> None:
    chunk = LogChunk("x.log", "server", 0, FIXTURE.read_bytes(), first_line=1)
    expected = _engine().scan(chunk)
    files = sorted(cache_dir.rglob("*.bin"))
    kinds = {p.parent.name for p in files}
    assert kinds == {"yaml", "hyperscan", "patterns", "catalogues"} or not _has_hyperscan()
    for n, path in enumerate(files):
        data = path.read_bytes()
        # a flipped payload byte, a cut file, someone else's file
        path.write_bytes(
            [data[:-1] + bytes([data[-1] ^ 0xFF]), data[: len(data) // 2], b"x"][n % 3]
        )
    assert _engine().scan(chunk) == expected
    assert _engine().scan(chunk) == expected  # rewritten


def test_an_unwritable_cache_is_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv(cache.ENV, str(blocker / "cache"))
    chunk = LogChunk("x.log", "server", 0, FIXTURE.read_bytes(), first_line=1)
    assert Engine(load_rules(), clock=lambda: 0.0).scan(chunk)
    monkeypatch.setenv(cache.ENV, "off")
    assert cache.cache_dir() is None
    cache.write("yaml", "k", b"payload")  # nothing happens, nothing raised
    assert cache.read("yaml", "k") is None


def test_cache_keeps_the_newest_entries(cache_dir: Path) -> None:
    for n in range(5):
        cache.write("ns", f"k{n}", b"x", keep=3)
        os.utime(cache_dir / "ns" / f"k{n}.bin", (n, n))
    cache.write("ns", "k5", b"x", keep=3)
    assert sorted(p.stem for p in (cache_dir / "ns").glob("*.bin")) == ["k3", "k4", "k5"]


def test_hyperscan_database_comes_from_the_cache(cache_dir: Path) -> None:
    if not _has_hyperscan():
        pytest.skip("hyperscan not installed")
    Engine(load_rules(), matcher="hyperscan")
    built = sorted((cache_dir / "hyperscan").glob("*.bin"))
    assert built
    stamps = [p.stat().st_mtime_ns for p in built]
    Engine(load_rules(), matcher="hyperscan")
    assert [p.stat().st_mtime_ns for p in built] == stamps  # read, not written again


def _has_hyperscan() -> bool:
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


HEAVY = ("opentelemetry", "httpx", "hyperscan", "textual", "drain3")


@pytest.mark.parametrize(
    "argv", [["--version"], ["status", "--json"], ["incidents", "--json"]], ids=" ".join
)
def test_light_commands_load_no_heavy_library(argv: list[str], tmp_path: Path) -> None:
    """--version, status and incidents read a store at most: no telemetry, HTTP client,
    matcher or TUI is imported (each of them costs more than the command)."""
    if argv != ["--version"]:
        argv = [*argv, "--state-dir", str(tmp_path)]  # no store there: a one-line error
    code = (
        "import json, sys\n"
        "from ascend_doctor.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_packs_read_from_the_cache_do_not_import_pyyaml(cache_dir: Path, tmp_path: Path) -> None:
    """A scan whose packs and catalogues are all in the cache never imports PyYAML (a tenth
    of its start-up); the first one, which parses them, does."""
    log = tmp_path / "empty.log"
    log.write_bytes(b"")
    code = (
        "import sys\n"
        "from ascend_doctor.cli.main import main\n"
        "try:\n"
        f"    main(['rules', 'scan', '--json', {str(log)!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('yaml' in sys.modules)\n"
    )
    env = {**os.environ, cache.ENV: str(cache_dir)}
    runs = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env=env,
        ).stdout.split()[-1]
        for _ in range(2)
    ]
    assert runs == ["True", "False"]


def test_shipped_catalogues_from_the_cache_equal_the_built_ones(cache_dir: Path) -> None:
    from ascend_doctor.rules import catalogue

    built, problems = catalogue.check_catalogues()
    assert not problems
    for _ in range(2):  # built and stored, then read back
        catalogue._builtin.cache_clear()
        got = catalogue._builtin()
        assert got.by_kind == built.by_kind
        assert len(got) == len(built) > 1000
    assert len(list((cache_dir / "catalogues").glob("*.bin"))) == 1
    entry = got.get("acl", "507035")
    assert entry is not None and entry.category is built.get("acl", "507035").category  # type: ignore[union-attr]
    for f in (cache_dir / "catalogues").glob("*.bin"):  # a payload of another shape: rebuilt
        f.write_bytes(f.read_bytes()[:40] + b"\0" * 50)
    catalogue._builtin.cache_clear()
    assert catalogue._builtin().by_kind == built.by_kind
    catalogue._builtin.cache_clear()


def test_a_catalogue_cache_entry_of_another_shape_is_a_miss(cache_dir: Path) -> None:
    import marshal

    from ascend_doctor.rules import catalogue

    n = len(catalogue._FIELDS)
    unknown = ("acl", "1", "no_such_category", 50, "root", *[""] * (n - 5))
    for rows in ([(("x",), 0)], [(unknown, 0)], [(unknown[:-1], 0)], {"a": 1}):
        cache.write("catalogues", "k", marshal.dumps(rows))
        assert catalogue._cached("k") is None
