"""Fixtures for the simulated host: a fresh host per test and a fake server runner."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from simhost_support import ServerRun

from ascend_doctor.sim.host import SimHost


@pytest.fixture
def host(tmp_path: Path) -> SimHost:
    """A fresh 8-card host with fast resets and loading."""
    return SimHost.create(tmp_path / "host", reset_seconds=0.1, load_seconds=0.1)


@pytest.fixture
def serve(host: SimHost) -> Iterator[Callable[..., ServerRun]]:
    """Factory of fake servers on free ports; all are killed after the test."""
    runs: list[ServerRun] = []

    def start(
        model: str,
        flags: list[str] | None = None,
        env: dict[str, str] | None = None,
        version: str | None = None,
    ) -> ServerRun:
        run = ServerRun(host, model, flags or [], env or {}, version)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.close()
