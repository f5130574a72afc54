"""Prometheus Alertmanager: ``POST /api/v2/alerts``.

Labels ``alertname``, ``category``, ``severity``, ``host``, ``device`` (and ``dedup_key``,
so two incidents never merge); annotations ``summary``, ``explain``, ``trace_id``. As
Alertmanager's client contract asks (and as Prometheus does), a firing alert is re-sent every
``resend_interval`` with ``endsAt`` four intervals ahead, so an alert whose sender died
resolves by itself; a resolve sets ``endsAt`` to the resolution time.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx

from .base import Sink, check_url, post_json, register
from .model import SUMMARY_MAX, Alert, Delivery, Kind, clip

ALERTNAME = "AscendDoctorIncident"
ANNOTATION_MAX = 4000


@register
class AlertmanagerSink(Sink):
    """``type = "alertmanager"``: ``url`` is Alertmanager's base URL (not a secret)."""

    type: ClassVar[str] = "alertmanager"
    handles: ClassVar[frozenset[Kind]] = frozenset({Kind.TRIGGER, Kind.RESOLVE})
    stateful: ClassVar[bool] = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resend_interval = self.cfg.resend_interval

    def check(self) -> None:
        """The base URL is valid."""
        check_url(self.prefix + "url", self.cfg.url)

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> Delivery:
        """POST the alert (a list of one)."""
        url = self.cfg.url.rstrip("/") + "/api/v2/alerts"
        body = json.dumps([document(alert, time.time(), self.resend_interval)]).encode()
        return await post_json(self, client, url, body)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def labels(alert: Alert) -> dict[str, str]:
    """The labels that identify the alert in Alertmanager."""
    out = {
        "alertname": ALERTNAME,
        "category": alert.category,
        "severity": alert.severity,
        "host": alert.host,
        "dedup_key": alert.dedup_key,
    }
    if alert.device:
        out["device"] = alert.device
    return out


def document(alert: Alert, now: float, resend_interval: float) -> dict[str, Any]:
    """One element of the POST body."""
    annotations = {
        "summary": clip(alert.summary, SUMMARY_MAX),
        "explain": clip(alert.explain, ANNOTATION_MAX),
        "trace_id": alert.trace_id,
        "root_cause": clip(alert.root_cause, ANNOTATION_MAX),
        "state": alert.state,
        "incident": "" if alert.incident_id is None else str(alert.incident_id),
    }
    if alert.evidence:
        annotations["evidence"] = clip("\n".join(alert.evidence[:10]), ANNOTATION_MAX)
    starts = alert.opened_at or alert.at or now
    if alert.kind == Kind.RESOLVE:
        ends = max(starts, alert.resolved_at or alert.at or now)
    else:
        ends = now + 4 * resend_interval
    return {
        "labels": labels(alert),
        "annotations": {k: v for k, v in annotations.items() if v},
        "startsAt": _iso(starts),
        "endsAt": _iso(ends),
    }


__all__ = ["ALERTNAME", "AlertmanagerSink", "document", "labels"]
