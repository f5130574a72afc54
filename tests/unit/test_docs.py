"""The manual points at things that exist: relative links resolve, and every `ascend-doctor`
command line in its shell blocks names real commands and options of this build."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from ascend_doctor.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "deploy" / "README.md"]
PENDING = "<!-- pending:"
"""First line of a chapter that describes a feature not merged yet: its commands are not checked."""


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.name}: link to {target} goes nowhere"
        # true to a fresh clone: nothing outside the repository (../shared/ exists only here)
        assert path.is_relative_to(ROOT), f"{page.name}: link to {target} leaves the repository"


def _command_lines(text: str) -> list[str]:
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("ascend-doctor "):
                lines.append(line.split(" | ")[0].split(" > ")[0])
    return lines


def _check(line: str) -> None:
    argv = shlex.split(line)[1:]
    cmd: click.Command = main
    path = ["ascend-doctor"]
    while isinstance(cmd, click.Group) and argv and not argv[0].startswith("-"):
        name = argv.pop(0)
        sub = cmd.get_command(click.Context(cmd), name)  # commands are imported lazily
        assert sub is not None, f"{line}: `{' '.join(path)}` has no command {name!r}"
        cmd, path = sub, [*path, name]
    options = {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts}
    options |= {"-h", "--help"}
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-":
            assert arg.split("=")[0] in options, f"{line}: `{' '.join(path)}` has no {arg}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_command_lines_use_real_commands_and_options(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    if text.startswith(PENDING):
        pytest.skip(f"{page.name} describes a feature that is not merged yet")
    for line in _command_lines(text):
        _check(line)


def test_the_checker_catches_a_wrong_option() -> None:
    with pytest.raises(AssertionError, match="has no --stat-dir"):
        _check("ascend-doctor status --stat-dir /x")
    with pytest.raises(AssertionError, match="has no command 'lnt'"):
        _check("ascend-doctor rules lnt")
    _check("ascend-doctor overrides clear --state-dir ./state")
