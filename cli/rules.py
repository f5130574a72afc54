"""``ascend-doctor rules ...`` and ``ascend-doctor findings``."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import click

from ascend_doctor.cli.views import plural
from ascend_doctor.core.errors import DoctorError
from ascend_doctor.core.events import LogChunk
from ascend_doctor.rules import Engine, RuleSet, load_rules
from ascend_doctor.rules.lint import catalogue_problems, rule_problems
from ascend_doctor.rules.matcher import hyperscan_error

SNIFF = 8192  # a NUL byte in the first 8 KiB: not text (the test grep and diagnose use)


def _load(dirs: tuple[Path, ...], *, check_safety: bool = True) -> RuleSet:
    try:
        return load_rules(list(dirs), check_safety=check_safety)
    except DoctorError as exc:
        raise click.ClickException(str(exc)) from None


rules_dir_option = click.option(
    "--rules",
    "rule_dirs",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Site rules directory on top of the builtin packs (repeatable).",
)


@click.group("rules")
def rules_group() -> None:
    """Check, test and use the rule packs."""


@rules_group.command("lint")
@click.argument("dirs", nargs=-1, type=click.Path(file_okay=False, path_type=Path))
def lint(dirs: tuple[Path, ...]) -> None:
    """Load the builtin packs and DIRS; every pattern must compile on both matching paths,
    with no nested unbounded quantifier or backreference; the code catalogues must name
    known categories, list each code once and cite a source."""
    rules = _load(dirs, check_safety=False)  # every unsafe pattern named, not the first
    problems = rule_problems(rules.text) + catalogue_problems(list(rules.catalogue_dirs))
    for rule in rules.text:
        error = hyperscan_error(rule.pattern)
        if error:
            problems.append(f"{rule.file}: rule '{rule.id}': hyperscan cannot compile: {error}")
        if not rule.explain:
            problems.append(f"{rule.file}: rule '{rule.id}': no 'explain'")
    for line in problems:
        click.echo(line, err=True)
    if problems:
        sys.exit(1)
    click.echo(f"{len(rules.text)} text rules and {len(rules.thresholds)} threshold rules: ok")


@rules_group.command("test")
@click.argument("dirs", nargs=-1, type=click.Path(file_okay=False, path_type=Path))
def test(dirs: tuple[Path, ...]) -> None:
    """Run every rule's examples through every matching path."""
    rules = _load(dirs)
    engines = [Engine(rules, matcher="re")]
    if Engine(rules).matcher == "hyperscan":
        engines.append(Engine(rules, matcher="hyperscan"))
    failures = 0
    for rule in rules.text:
        for engine in engines:
            for kind, lines in rule.examples.items():
                for text in lines:
                    chunk = LogChunk("example", rule.sources[0], 0, (text + "\n").encode())
                    hit = rule.id in {f.rule for f in engine.scan(chunk)}
                    if hit != (kind == "match"):
                        failures += 1
                        verb = "does not match" if kind == "match" else "matches near miss"
                        click.echo(
                            f"{rule.file}: rule '{rule.id}' ({engine.matcher}) {verb}: {text}",
                            err=True,
                        )
    if failures:
        sys.exit(1)
    paths = "+".join(e.matcher for e in engines)
    click.echo(f"{len(rules.text)} rules, every example passes ({paths})")


jobs_option = click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes for files of more than one chunk (4 MiB); default: every core.",
)


@rules_group.command("scan")
@click.argument("files", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per finding per line.")
@click.option("--source", default=None, help="Stream kind of the input (default: from the path).")
@click.option("--exit-code", is_flag=True, help="Exit with 1 when anything is found.")
@rules_dir_option
@jobs_option
def scan(
    files: tuple[str, ...],
    as_json: bool,
    source: str | None,
    exit_code: bool,
    rule_dirs: tuple[Path, ...],
    jobs: int | None,
) -> None:
    """Scan FILES (- for stdin) offline and print every finding.

    Exit status: 2 when a file cannot be read or is not text (the others are still scanned),
    1 with --exit-code when something was found, else 0 (as ``diagnose``).
    """
    import gc

    from ascend_doctor.cli import parallel
    from ascend_doctor.collectors.logs import read_chunks, source_kind

    # a printed finding shows its first evidence line only: no context lines are cut for it
    engine = Engine(_load(rule_dirs), clock=lambda: 0.0, context_before=0, context_after=0)
    gc.freeze()  # the packs live as long as the scan: the collector need not walk them
    jobs = jobs or parallel.default_jobs()
    found = 0
    unusable = 0
    for name in files:
        try:
            stream = sys.stdin.buffer if name == "-" else open(name, "rb")
        except OSError as exc:
            click.echo(f"{name}: {exc.strerror or exc}", err=True)
            unusable += 1
            continue
        kind = source or ("server" if name == "-" else source_kind(name))
        with stream:
            head = stream.read(SNIFF)
            if b"\0" in head:
                click.echo(f"{name}: binary file, not a log: skipped", err=True)
                unusable += 1
                continue
            parts = (
                parallel.regular_pieces(stream, already_read=len(head))
                if jobs > 1 and name != "-"
                else []
            )
            if len(parts) > 1:
                render = functools.partial(_finding_line, as_json=as_json)
                try:
                    for _, _, lines in parallel.scan_pieces(
                        engine, name, name, kind, parts, jobs, render
                    ):
                        found += _print_lines(lines)
                except parallel.WorkerDied as exc:
                    click.echo(f"{name}: {exc.strerror}", err=True)
                    unusable += 1
                continue
            block = parallel.block_of(stream)
            chunks = read_chunks(stream, name, kind, already_read=head, block=block)
            for chunk in chunks:
                with parallel.paused_gc():
                    findings = engine.scan(chunk)
                found += _print_lines([_finding_line(f, as_json) for f in findings])
    if not as_json:
        click.echo(plural(found, "finding"), err=True)
    if unusable:
        sys.exit(2)
    if exit_code and found:
        sys.exit(1)


def _print_lines(lines: list[str]) -> int:
    """Print a chunk's findings in one write, one line each."""
    if lines:
        click.echo("\n".join(lines))
    return len(lines)


def _finding_line(f: Any, as_json: bool) -> str:
    first = f.evidence[0] if f.evidence else None
    if as_json and first is not None:
        line = _json_line(f, first)
        if line is not None:
            return line
    row = {
        "rule": f.rule,
        "category": f.category.value,
        "severity": f.severity.label,
        "path": f.path,
        "line": first.line if first else 0,
        "text": first.text if first else "",
        "captures": f.captures,
    }
    if as_json:
        return json.dumps(row)
    return f"{row['path']}:{row['line']}: [{row['category']}] {f.summary}"


_QUOTE = json.encoder.encode_basestring_ascii  # what json.dumps quotes strings with


def _json_line(f: Any, first: Any) -> str | None:
    """``json.dumps`` of the row ``_finding_line`` builds, byte for byte, written directly
    when every value is a plain str (the line number an int, the captures str to str): a
    failure-dense log prints a row per line, and the encoder's set-up per call costs more
    than the row. None for any other value (then json.dumps writes it)."""
    rule, category, severity, path = f.rule, f.category.value, f.severity.label, f.path
    number, text = first.line, first.text
    if (
        type(number) is not int
        or type(rule) is not str
        or type(category) is not str
        or type(severity) is not str
        or type(path) is not str
        or type(text) is not str
    ):
        return None
    parts = []
    for k, v in f.captures.items():
        if type(k) is not str or type(v) is not str:
            return None
        parts.append(f"{_QUOTE(k)}: {_QUOTE(v)}")
    key = (rule, category, severity, path)
    head = _HEADS.get(key)
    if head is None:
        if len(_HEADS) >= 4096:
            _HEADS.clear()
        head = _HEADS[key] = (
            f'{{"rule": {_QUOTE(rule)}, "category": {_QUOTE(category)}, '
            f'"severity": {_QUOTE(severity)}, "path": {_QUOTE(path)}, '
        )
    return f'{head}"line": {number}, "text": {_QUOTE(text)}, "captures": {{{", ".join(parts)}}}}}'


_HEADS: dict[tuple[str, str, str, str], str] = {}
"""The start of a row, quoted once per rule, category, severity and file (a few hundred)."""


@click.command("findings")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The doctor's state dir.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per finding per line.")
def findings(state_dir: Path | None, as_json: bool) -> None:
    """The stored findings, oldest first."""
    from ascend_doctor.cli.common import open_store

    store = open_store(state_dir)
    rows = store.findings()
    store.close()
    for r in rows:
        f = r.finding
        row = {
            "rule": f.rule,
            "category": f.category.value,
            "severity": f.severity.label,
            "path": f.path,
            "offset": f.offset,
            "text": f.evidence[0].text if f.evidence else f.summary,
            "incident": r.incident_id,
            "at": f.at,
        }
        if as_json:
            click.echo(json.dumps(row))
        else:
            click.echo(f"#{row['incident']} {row['severity']:8} {row['category']:22} {row['text']}")


__all__ = ["findings", "rules_group"]
