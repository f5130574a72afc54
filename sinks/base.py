"""The one sink interface, secrets read at send time, and the HTTP delivery every HTTP sink
shares (what counts as retryable: network errors, timeouts, 429 and 5xx)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

import httpx

from ascend_doctor.core.config import AlertSinkConfig
from ascend_doctor.core.errors import ConfigError

from .model import Alert, Delivery, Kind

REDACTED = "<redacted>"
# httpx logs every request's URL at INFO, and a Slack or webhook URL is a secret
logging.getLogger("httpx").setLevel(logging.WARNING)
RESPONSE_KEPT = 500  # characters of a sink's answer kept in the outbox


class Secret:
    """A secret named by config (``<key>_env`` or ``<key>_file``), read when it is used so a
    rotated secret needs no restart. Its ``repr`` never shows the value."""

    def __init__(self, key: str, env: str, file: str, environ: Mapping[str, str]) -> None:
        self.key = key
        self.env = env
        self.file = file
        self._environ = environ

    def __repr__(self) -> str:
        return f"Secret({self.key}={REDACTED})"

    @property
    def configured(self) -> bool:
        """Whether config names a variable or a file."""
        return bool(self.env or self.file)

    def value(self) -> str:
        """The secret now; ConfigError naming the key when it cannot be read."""
        if self.env:
            value = self._environ.get(self.env, "")
            if not value:
                raise ConfigError(
                    f"config '{self.key}_env': environment variable {self.env} is not set"
                )
            return value.strip()
        if self.file:
            try:
                value = Path(self.file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(
                    f"config '{self.key}_file': cannot read {self.file}: {exc.strerror or exc}"
                ) from None
            if not value:
                raise ConfigError(f"config '{self.key}_file': {self.file} is empty")
            return value
        raise ConfigError(f"config '{self.key}_env' or '{self.key}_file': expected one of them")


def check_url(key: str, url: str, *, shown: bool = True) -> None:
    """A start-up check that ``url`` is an absolute http(s) URL (the value is quoted only when
    it is not a secret)."""
    try:
        parsed = httpx.URL(url)
        good = parsed.scheme in ("http", "https") and bool(parsed.host)
    except (httpx.InvalidURL, TypeError, ValueError):
        good = False
    if not good:
        what = f"is {url!r}" if shown else "does not hold a valid URL"
        raise ConfigError(f"config '{key}' {what}: expected an http:// or https:// URL")


class Sink:
    """Where alerts go: one subclass per file, registered by its ``type`` name."""

    type: ClassVar[str] = ""
    """The ``type`` of ``[[alerts.sinks]]`` this class serves."""
    handles: ClassVar[frozenset[Kind]] = frozenset(Kind)
    """The kinds this sink can deliver (Alertmanager has no acknowledge)."""
    stateful: ClassVar[bool] = False
    """The sink keeps alert state: a test alert is resolved right after it triggers."""
    default_rate: ClassVar[float] = 10.0
    default_burst: ClassVar[int] = 20

    def __init__(
        self, cfg: AlertSinkConfig, prefix: str, environ: Mapping[str, str] | None = None
    ) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.prefix = prefix
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self.role = cfg.role or ("page" if self.type == "pagerduty" else "notify")
        self.rate = cfg.rate or self.default_rate
        self.burst = cfg.burst or self.default_burst
        self.timeout = cfg.timeout
        self.resend_interval = 0.0
        """Seconds between re-sends of firing alerts; 0 for sinks that need none."""

    def secret(self, key: str) -> Secret:
        """The secret ``<key>_env`` / ``<key>_file`` of this sink's config."""
        env = getattr(self.cfg, f"{key}_env")
        file = getattr(self.cfg, f"{key}_file")
        if env and file:
            raise ConfigError(
                f"config '{self.prefix}{key}_env' and '{self.prefix}{key}_file': set only one"
            )
        return Secret(self.prefix + key, env, file, self.environ)

    def secrets(self) -> list[str]:
        """The secret values now (to scrub them from any text that is kept or logged)."""
        return []

    def check(self) -> None:
        """Start-up checks: every secret readable, every URL valid; ConfigError naming the key."""

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> Delivery:
        """Deliver one alert; never raises for a delivery failure."""
        raise NotImplementedError

    def scrubber(self) -> Callable[[str], str]:
        """A function removing this sink's secrets from a text."""
        try:
            values = [v for v in self.secrets() if v]
        except ConfigError:
            values = []

        def scrub(text: str) -> str:
            for v in values:
                text = text.replace(v, REDACTED)
            return text

        return scrub


async def post_json(
    sink: Sink,
    client: httpx.AsyncClient,
    url: str,
    content: bytes,
    headers: Mapping[str, str] | None = None,
) -> Delivery:
    """POST a JSON body; classify the answer (2xx ok; 429, 5xx and network errors retry;
    other statuses are permanent failures recorded with the response)."""
    scrub = sink.scrubber()
    all_headers = {"Content-Type": "application/json", "User-Agent": "ascend-doctor"}
    all_headers.update(headers or {})
    try:
        r = await client.post(url, content=content, headers=all_headers, timeout=sink.timeout)
    except httpx.TimeoutException:
        return Delivery(False, retry=True, error=f"timed out after {sink.timeout:g}s")
    except httpx.HTTPError as exc:
        return Delivery(False, retry=True, error=scrub(f"{type(exc).__name__}: {exc}"))
    return classify(r.status_code, r.text, r.headers.get("Retry-After", ""), scrub)


def classify(status: int, body: str, retry_after: str, scrub: Callable[[str], str]) -> Delivery:
    """What an HTTP answer means for the delivery."""
    response = scrub(f"{status} {body.strip()}")[:RESPONSE_KEPT]
    if 200 <= status < 300:
        return Delivery(True, response=response)
    wait = 0.0
    try:
        wait = max(0.0, float(retry_after)) if retry_after else 0.0
    except ValueError:
        wait = 0.0  # an HTTP date: the backoff decides
    if status == 429 or status >= 500:
        return Delivery(
            False, retry=True, error=f"HTTP {status}", response=response, retry_after=wait
        )
    return Delivery(False, retry=False, error=f"HTTP {status} (rejected)", response=response)


SINKS: dict[str, type[Sink]] = {}
"""Sink classes by ``type`` name."""


def register(cls: type[Sink]) -> type[Sink]:
    """Class decorator: make a sink class known by its ``type``."""
    SINKS[cls.type] = cls
    return cls


__all__ = ["REDACTED", "SINKS", "Secret", "Sink", "check_url", "classify", "post_json", "register"]
