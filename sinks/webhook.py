"""Generic webhook: the alert document (schema ``ascend-doctor.alert/v1``, see ``model.Alert``)
as the JSON body, signed.

Headers: ``X-Ascend-Doctor-Schema`` (the schema version), ``X-Ascend-Doctor-Timestamp`` (epoch
seconds) and, when a secret is configured, ``X-Ascend-Doctor-Signature: sha256=<hex>``, the
HMAC-SHA256 of ``<timestamp>.<body>`` under the secret. A receiver recomputes it and refuses
old timestamps (replays). Configured ``headers`` are added (``"Name: value"``; ``env:VAR``
values are read from the environment when sent).

A body (schema v1; every field is documented on ``ascend_doctor.sinks.model.Alert``)::

    {"schema": "ascend-doctor.alert/v1", "kind": "trigger", "event": "escalated",
     "dedup_key": "ascend-doctor:node-7:12:1796234242", "host": "node-7",
     "summary": "NPU 3 lost its heartbeat (device_fault on node-7 npu3, escalated)",
     "severity": "critical", "category": "device_fault", "subject": "npu3", "device": "npu3",
     "incident_id": 12, "state": "escalated", "rule": "drv-soft-fault-heartbeat-lost",
     "root_cause": "NPU 3 lost its heartbeat", "explain": "...",
     "evidence": ["/var/log/npu/plog/plog-1.log:88: [ERROR] DRV... heartbeat lost"],
     "actions": [{"name": "reset_device", "outcome": "refused", "reason": "...", "at": 1.7e9}],
     "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "acknowledged": false,
     "opened_at": 1796234242.1, "resolved_at": 1796234250.4, "at": 1796234250.5,
     "repeat": false, "extra": {}}

``kind`` is ``trigger``, ``acknowledge`` or ``resolve``; ``dedup_key`` is shared by every
alert of one incident. Receivers must ignore fields they do not know.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import ClassVar

import httpx

from ascend_doctor.core.errors import ConfigError

from .base import Sink, check_url, post_json, register
from .model import SCHEMA, Alert, Delivery

SIGNATURE_HEADER = "X-Ascend-Doctor-Signature"
TIMESTAMP_HEADER = "X-Ascend-Doctor-Timestamp"
SCHEMA_HEADER = "X-Ascend-Doctor-Schema"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of ``<timestamp>.<body>`` under ``secret``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


@register
class WebhookSink(Sink):
    """``type = "webhook"``: ``url`` (or ``url_env``/``url_file`` when the URL is a secret),
    ``secret_env``/``secret_file`` for the signature, ``headers``."""

    type: ClassVar[str] = "webhook"

    def _url(self) -> str:
        secret = self.secret("url")
        return secret.value() if secret.configured else self.cfg.url

    def _headers(self, *, secret_only: bool = False) -> dict[str, str]:
        out = {}
        for i, item in enumerate(self.cfg.headers):
            name, sep, value = item.partition(":")
            if not sep or not name.strip():
                raise ConfigError(
                    f"config '{self.prefix}headers[{i}]' is {item!r}: expected 'Name: value'"
                )
            value = value.strip()
            if secret_only and not value.startswith("env:"):
                continue
            if value.startswith("env:"):
                var = value[4:]
                value = self.environ.get(var, "")
                if not value:
                    raise ConfigError(
                        f"config '{self.prefix}headers[{i}]': environment variable {var} is not set"
                    )
            out[name.strip()] = value
        return out

    def check(self) -> None:
        """URL valid, secret and header variables readable."""
        secret = self.secret("url")
        if secret.configured:
            key = secret.key + ("_env" if secret.env else "_file")
            check_url(key, secret.value(), shown=False)
        else:
            check_url(self.prefix + "url", self.cfg.url)
        sign = self.secret("secret")
        if sign.configured:
            sign.value()
        self._headers()

    def secrets(self) -> list[str]:
        """The URL when it is a secret, the HMAC secret, the env-sourced header values."""
        out = []
        for key in ("url", "secret"):
            s = self.secret(key)
            if s.configured:
                out.append(s.value())
        out.extend(self._headers(secret_only=True).values())
        return out

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> Delivery:
        """POST the document, signed."""
        body = alert.body()
        timestamp = str(int(time.time()))
        headers = self._headers()
        headers[SCHEMA_HEADER] = SCHEMA
        headers[TIMESTAMP_HEADER] = timestamp
        sign = self.secret("secret")
        if sign.configured:
            headers[SIGNATURE_HEADER] = signature(sign.value(), timestamp, body)
        return await post_json(self, client, self._url(), body, headers)


__all__ = [
    "SCHEMA_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WebhookSink",
    "signature",
]
