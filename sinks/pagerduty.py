"""PagerDuty Events API v2: trigger, acknowledge and resolve, one dedup_key per incident.

Summary at most 1,024 characters; the whole event at most 512 KB, evidence trimmed first,
then actions; severity is critical/error/warning/info; ``source`` is the host.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx

from .base import Sink, check_url, post_json, register
from .model import SUMMARY_MAX, Alert, Delivery, Kind, clip

EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
PAYLOAD_MAX = 512 * 1024
EVIDENCE_LINE_MAX = 1000


@register
class PagerDutySink(Sink):
    """``type = "pagerduty"``: ``routing_key_env`` or ``routing_key_file``; ``url`` only to
    point it elsewhere (a proxy, a test receiver)."""

    type: ClassVar[str] = "pagerduty"
    stateful: ClassVar[bool] = True

    def check(self) -> None:
        """The routing key is readable and the URL valid."""
        self.secret("routing_key").value()
        check_url(self.prefix + "url", self.cfg.url or EVENTS_URL)

    def secrets(self) -> list[str]:
        """The routing key."""
        return [self.secret("routing_key").value()]

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> Delivery:
        """POST one event."""
        body = event(alert, self.secret("routing_key").value())
        return await post_json(self, client, self.cfg.url or EVENTS_URL, body)


def event(alert: Alert, routing_key: str) -> bytes:
    """The Events v2 document for an alert, within PagerDuty's size limits."""
    doc: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": alert.kind,
        "dedup_key": alert.dedup_key,
    }
    if alert.kind != Kind.TRIGGER:
        return json.dumps(doc).encode()
    evidence = [clip(line, EVIDENCE_LINE_MAX) for line in alert.evidence]
    actions = list(alert.actions)
    while True:
        doc["payload"] = {
            "summary": clip(alert.summary, SUMMARY_MAX),
            "source": alert.host,
            "severity": alert.severity,
            "timestamp": datetime.fromtimestamp(alert.at or alert.opened_at, UTC).isoformat(),
            "component": alert.subject,
            "group": alert.category,
            "class": alert.rule,
            "custom_details": {
                "event": alert.event,
                "incident": alert.incident_id,
                "state": alert.state,
                "root_cause": alert.root_cause,
                "explain": alert.explain,
                "evidence": evidence,
                "actions": actions,
                "trace_id": alert.trace_id,
                "repeat": alert.repeat,
            },
        }
        doc["client"] = "ascend-doctor"
        data = json.dumps(doc).encode()
        if len(data) <= PAYLOAD_MAX:
            return data
        # evidence goes first, then the oldest actions, then the explanation
        if evidence:
            evidence = evidence[: len(evidence) // 2]
        elif actions:
            actions = actions[len(actions) // 2 + 1 :] if len(actions) > 1 else []
        else:
            details = doc["payload"]["custom_details"]
            details["explain"] = clip(alert.explain, 1000)
            details["root_cause"] = clip(alert.root_cause, 1000)
            return json.dumps(doc).encode()


__all__ = ["EVENTS_URL", "PAYLOAD_MAX", "PagerDutySink", "event"]
