"""The process collector on real processes: a sleeping child with a sleeping grandchild."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from ascend_doctor.collectors.process import COLLECTOR, ProcessCollector, tree_stats
from ascend_doctor.core.events import Sample
from tests.conftest import poll

# The child starts a grandchild and then sleeps; both die with the test.
TREE = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
    "time.sleep(30)\n"
)


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", TREE])
    try:
        poll(lambda: psutil.Process(proc.pid).children(), 10.0, "the grandchild to start")
        yield proc
    finally:
        kids = []
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
        for p in kids:
            p.kill()
        proc.kill()
        proc.wait()


def by_subject(samples: list[Sample]) -> dict[str, Sample]:
    assert all(s.collector == COLLECTOR for s in samples)
    return {s.subject: s for s in samples}


async def test_tree_counts_children_and_memory(tree: subprocess.Popen[bytes]) -> None:
    samples = by_subject(await ProcessCollector(lambda: tree.pid).collect())
    server = samples["server"].values
    assert server["alive"] is True
    assert server["pid"] == tree.pid
    assert server["children"] == 1
    assert server["rss_bytes"] > 0
    assert server["threads"] >= 2
    assert server["open_files"] is None or server["open_files"] >= 0
    assert server["cpu_percent"] is None  # first run: nothing to compare with


async def test_second_run_measures_cpu_percent(tree: subprocess.Popen[bytes]) -> None:
    ticks = iter([100.0, 102.0])
    collector = ProcessCollector(lambda: tree.pid, clock=lambda: next(ticks))
    await collector.collect()
    server = by_subject(await collector.collect())["server"].values
    assert server["cpu_percent"] is not None
    assert 0.0 <= server["cpu_percent"] < 100.0  # two sleeping processes


async def test_host_sample_has_memory_and_load() -> None:
    host = by_subject(await ProcessCollector(lambda: None).collect())["host"].values
    assert host["mem_available_bytes"] > 0
    assert 0.0 <= host["mem_percent"] <= 100.0
    assert host["load1"] >= 0.0


async def test_no_pid_gives_not_alive() -> None:
    server = by_subject(await ProcessCollector(lambda: None).collect())["server"].values
    assert server == {"pid": None, "alive": False}


async def test_killed_pid_gives_alive_false_not_an_exception(
    tree: subprocess.Popen[bytes],
) -> None:
    collector = ProcessCollector(lambda: tree.pid)
    assert by_subject(await collector.collect())["server"].values["alive"] is True
    tree.kill()
    tree.wait()
    server = by_subject(await collector.collect())["server"].values
    assert server == {"pid": tree.pid, "alive": False}


def test_zombie_counts_as_gone(tree: subprocess.Popen[bytes]) -> None:
    tree.kill()
    poll(
        lambda: psutil.Process(tree.pid).status() == psutil.STATUS_ZOMBIE,
        10.0,
        "the child to become a zombie",
    )
    assert tree_stats(tree.pid).alive is False
