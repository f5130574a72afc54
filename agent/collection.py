"""Runs the registered collectors: each on its schedule, isolated, its status recorded.

The runner owns what a collector does not: when it runs (only while the server runs, for the
ones that ask the server), its duration, its failures (logged and counted, never stopping
another collector), its :class:`CollectorStatus` in the store, and where its samples go.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from ascend_doctor.collectors import REGISTRY, Collector, CollectorContext, CollectorSpec
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.events import Sample
from ascend_doctor.core.records import CollectorStatus
from ascend_doctor.core.store import Store

log = logging.getLogger(__name__)


class CollectorRunner:
    """One collector on its schedule."""

    def __init__(
        self,
        spec: CollectorSpec,
        collector: Collector,
        store: Store,
        *,
        interval: float,
        active: Callable[[], bool],
        on_samples: Callable[[Sequence[Sample]], None],
        on_evidence: Callable[[str, str], None],
        on_run: Callable[[str, float, bool], None],
    ) -> None:
        self.spec = spec
        self.collector = collector
        self.store = store
        self.interval = interval
        self._active = active
        self._on_samples = on_samples
        self._on_evidence = on_evidence
        self._on_run = on_run
        self.status = CollectorStatus(spec.name)
        """How it has been doing (also in the store)."""
        self.first_run = asyncio.Event()
        """Set when its first run is over, however it went."""

    async def run(self) -> None:
        """Run until cancelled (or until its binary turns out not to exist)."""
        if self.spec.while_running:
            await asyncio.sleep(self.interval)
        while True:
            if self._active():
                await self.once()
                if "not found" in self.status.last_error:
                    log.warning("collector %s disabled: %s", self.spec.name, self.status.last_error)
                    return
            await asyncio.sleep(self.interval)

    async def once(self) -> None:
        """One run: samples stored and handed on, the outcome recorded."""
        name = self.spec.name
        t0 = time.monotonic()
        st = dataclasses.replace(self.status, runs=self.status.runs + 1)
        try:
            samples = await self.collector.collect()
            self._on_samples(samples)
            st = dataclasses.replace(st, ok=True, last_ok_at=time.time(), last_error="")
        except CollectorError as exc:
            log.warning("collector %s: %s", name, exc)
            st = dataclasses.replace(
                st,
                ok=False,
                failures=st.failures + 1,
                last_error=str(exc),
                last_raw=exc.raw or st.last_raw,
            )
            if exc.evidence:
                self._on_evidence(name, exc.evidence)
        except Exception as exc:  # a failing part is logged and isolated; the daemon goes on
            log.exception("collector %s failed", name)
            st = dataclasses.replace(
                st, ok=False, failures=st.failures + 1, last_error=f"{type(exc).__name__}: {exc}"
            )
        st = dataclasses.replace(
            st, last_duration_s=round(time.monotonic() - t0, 3), at=time.time()
        )
        self.status = st
        try:
            self._on_run(name, st.last_duration_s, st.ok)
            self.store.set_collector(st)
        finally:
            self.first_run.set()


def build_runners(
    ctx: CollectorContext,
    store: Store,
    *,
    watched: bool,
    running: Callable[[], bool],
    on_samples: Callable[[Sequence[Sample]], None],
    on_evidence: Callable[[str, str], None],
    on_run: Callable[[str, float, bool], None],
) -> list[CollectorRunner]:
    """A runner for every registered collector its config enables (the ones that need a
    server only when one is ``watched``; the ones that ask the server only while it is
    ``running``)."""
    runners = []
    for spec in REGISTRY.values():
        if not spec.enabled(ctx.config) or (spec.needs_server and not watched):
            continue
        if ctx.attached and not spec.in_attach(ctx.config):
            continue
        runners.append(
            CollectorRunner(
                spec,
                spec.build(ctx),
                store,
                interval=spec.interval(ctx.config),
                active=running if spec.while_running else _always,
                on_samples=on_samples,
                on_evidence=on_evidence,
                on_run=on_run,
            )
        )
    return runners


def _always() -> bool:
    return True


__all__ = ["CollectorRunner", "build_runners"]
