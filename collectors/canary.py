"""The ``canary`` collector: a small deterministic completion the server must answer right.

``/health`` says the API server is up, not that it serves: a server whose engine loop is stuck
with nothing running answers /health 200 and never completes a request
(vllm-project/vllm#17972), and a server on a bad card or after an upgrade answers 200 with
``!!!!!!`` or nothing (vllm-project/vllm-ascend#445, #6980). Every ``interval`` the canary
scrapes ``/metrics`` (what runs, how long the scrape takes) and sends one greedy, seeded,
few-token completion of a fixed prompt; :mod:`canary_judge` says what the answer means.

The first good answer of each launch (same model, same flags: the launch key) is kept as its
reference in the state dir, so a later answer that drifts from it is seen too. Canary traffic
is marked, a header and the OpenAI ``user`` field, so gateways, quotas and dashboards can leave
it out. It never runs while the server starts (the runner asks only a RUNNING server) or while
a remediation step runs (``busy``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ascend_doctor.collectors.base import CollectorSpec, Tally
from ascend_doctor.collectors.canary_judge import Verdict, completion_text, judge
from ascend_doctor.collectors.vllm import parse_metrics
from ascend_doctor.core.errors import CollectorError
from ascend_doctor.core.events import Sample

COLLECTOR = "canary"
HEADER = "X-Ascend-Doctor-Canary"
"""The header every canary request carries (value ``1``)."""
USER = "ascend-doctor-canary"
"""The OpenAI ``user`` field of every canary request."""
REFERENCE_FILE = "canary-reference.json"
KEEP_REFERENCES = 16
"""Launches whose reference answer is kept (a launch changed by remediation is a new one)."""


class References:
    """The reference answer of each launch key, in a JSON file replaced atomically (a doctor
    restarted mid-launch compares with what it recorded before)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def _read(self) -> dict[str, str]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: the next good answer is the reference
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, str)}

    def get(self, key: str) -> str | None:
        """The reference of ``key``, None when none was recorded."""
        return self._read().get(key)

    def set(self, key: str, text: str) -> None:
        """Record ``text`` as the reference of ``key`` (the oldest launches are forgotten)."""
        if self.path is None:
            return
        data = self._read()
        data.pop(key, None)
        data[key] = text
        data = dict(list(data.items())[-KEEP_REFERENCES:])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".canary.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)


class CanaryCollector:
    """Sends the canary; counts consecutive failures and timeouts."""

    name = COLLECTOR

    def __init__(
        self,
        base_url: str,
        *,
        prompt: str,
        max_tokens: int,
        seed: int,
        timeout: float,
        references: References,
        launch_key: Callable[[], str] = lambda: "",
        busy: Callable[[], bool] = lambda: False,
        tally: Tally | None = None,
    ) -> None:
        self.tally = tally or Tally()
        self.base_url = base_url.rstrip("/")
        self.prompt, self.max_tokens, self.seed, self.timeout = prompt, max_tokens, seed, timeout
        self.references = references
        self._launch_key = launch_key
        self._busy = busy
        self.timeouts = 0
        """Consecutive canaries without an answer."""
        self.failures = 0
        """Consecutive canaries that failed, whatever the way."""
        self.last = Verdict("ok", "")
        """The last verdict."""

    def body(self, model: str) -> dict[str, Any]:
        """The request: greedy and seeded, so a healthy server answers the same every time."""
        return {
            "model": model,
            "prompt": self.prompt,
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "seed": self.seed,
            "user": USER,
        }

    async def collect(self) -> list[Sample]:
        """One ``server`` sample; nothing while a remediation step runs."""
        if self._busy():
            return []
        at = time.time()
        values: dict[str, Any] = {}
        async with httpx.AsyncClient(timeout=self.timeout, trust_env=False) as client:
            await self._scrape(client, values)
            t0 = time.monotonic()
            verdict = await self._ask(client, values)
            values["canary_latency_ms"] = round((time.monotonic() - t0) * 1000, 1)
        self.last = verdict
        self.timeouts = self.timeouts + 1 if verdict.kind == "timeout" else 0
        self.failures = 0 if verdict.ok else self.failures + 1
        values.update(
            canary_kind=verdict.kind,
            canary_ok=int(verdict.ok),
            canary_corrupt=int(verdict.corrupt),
            canary_timeouts=self.timeouts,
            canary_failures=self.failures,
            canary_detail=verdict.detail,
            canary_text=verdict.text,
        )
        return [Sample(COLLECTOR, "server", at, values)]

    async def _scrape(self, client: httpx.AsyncClient, values: dict[str, Any]) -> None:
        """``/metrics``: what is running, and how long the front end takes to say it (a
        front end whose event loop is blocked answers late or not at all)."""
        t0 = time.monotonic()
        try:
            metrics = parse_metrics((await client.get(self.base_url + "/metrics")).text)
            values["running"] = metrics.values.get("running")
            values["waiting"] = metrics.values.get("waiting")
            values["metrics_timeout"] = 0
        except httpx.TimeoutException:
            values["metrics_timeout"] = 1
        except (httpx.HTTPError, CollectorError) as exc:
            values["metrics_error"] = f"{type(exc).__name__}: {exc}"[:200]
        values["metrics_latency_ms"] = round((time.monotonic() - t0) * 1000, 1)

    async def _ask(self, client: httpx.AsyncClient, values: dict[str, Any]) -> Verdict:
        try:
            listed = (await client.get(self.base_url + "/v1/models")).json()
            model = str(listed["data"][0]["id"])
            key = f"{self._launch_key()}|{model}"
            reference = self.references.get(key)
            resp = await client.post(
                self.base_url + "/v1/completions", json=self.body(model), headers={HEADER: "1"}
            )
        except httpx.TimeoutException:
            return Verdict("timeout", f"no answer within {self.timeout:g}s")
        except httpx.HTTPError as exc:
            return Verdict("unreachable", f"{type(exc).__name__}: {exc}"[:200])
        except (ValueError, KeyError, IndexError, TypeError):
            return Verdict("malformed", "/v1/models did not list a model")
        verdict = judge(resp.status_code, resp.text, reference)
        self.tally.add(_completion_tokens(resp.text))
        values["canary_reference"] = "kept" if reference is not None else "recorded"
        text = completion_text(resp.text)
        if verdict.ok and reference is None and text is not None:
            self.references.set(key, text)
        return verdict


def _completion_tokens(body: str) -> int:
    try:
        return int(json.loads(body)["usage"]["completion_tokens"])
    except (ValueError, KeyError, TypeError):
        return 0


SPEC = CollectorSpec(
    name=COLLECTOR,
    build=lambda ctx: CanaryCollector(
        ctx.server_url,
        prompt=ctx.config.canary.prompt,
        max_tokens=ctx.config.canary.max_tokens,
        seed=ctx.config.canary.seed,
        timeout=ctx.config.canary.timeout,
        references=References(
            ctx.state_dir / REFERENCE_FILE if ctx.state_dir is not None else None
        ),
        launch_key=ctx.launch_key,
        busy=ctx.busy,
        tally=ctx.canary_tokens,
    ),
    enabled=lambda cfg: cfg.canary.enabled,
    interval=lambda cfg: cfg.canary.interval,
    needs_server=True,
    while_running=True,  # never while the server starts: it has nothing to answer yet
    in_attach=lambda cfg: cfg.canary.attach,
)
"""The ``canary`` collector as registered."""


__all__ = ["COLLECTOR", "HEADER", "SPEC", "USER", "CanaryCollector", "References"]
