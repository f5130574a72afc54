"""deploy/docker/Dockerfile copies everything `pip install /src` reads."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"


def _copies() -> list[tuple[list[str], str]]:
    out = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY "):
            *sources, dest = line.split()[1:]
            out.append((sources, dest))
    return out


def test_dockerfile_copies_every_package_folder() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    copied = {s for sources, _ in _copies() for s in sources}
    assert folders <= copied, folders - copied
    assert {"pyproject.toml", "README.md"} <= copied


def test_package_data_and_readme_are_inside_what_is_copied() -> None:
    # what setuptools reads when the image runs `pip install /src`
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    copied = {s for sources, _ in _copies() for s in sources}
    assert pyproject["project"]["readme"] in copied
    package_dir = pyproject["tool"]["setuptools"]["package-dir"]
    for package, globs in pyproject["tool"]["setuptools"]["package-data"].items():
        folder = package_dir[package]
        assert folder in copied
        for pattern in globs:
            assert list((ROOT / folder).glob(pattern)), f"{folder}/{pattern} matches nothing"
    for dest in {dest for _, dest in _copies()}:
        assert dest.startswith("/src/")
