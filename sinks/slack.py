"""Slack incoming webhook: a readable message (blocks) per alert.

Incoming webhooks return no message id, so a resolve (or acknowledge) is a follow-up
message naming the incident rather than a thread reply. Slack allows about one message per
second per webhook: the token bucket defaults to that.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx

from .base import Sink, check_url, post_json, register
from .model import Alert, Delivery, Kind, clip

TEXT_MAX = 2900  # a section block's text is limited to 3,000 characters
ICONS = {"critical": ":red_circle:", "error": ":large_orange_circle:", "warning": ":warning:"}


@register
class SlackSink(Sink):
    """``type = "slack"``: the webhook URL is a secret, from ``url_env`` or ``url_file``."""

    type: ClassVar[str] = "slack"
    default_rate: ClassVar[float] = 1.0
    default_burst: ClassVar[int] = 1

    def check(self) -> None:
        """The webhook URL is readable and valid."""
        secret = self.secret("url")
        check_url(secret.key + ("_env" if secret.env else "_file"), secret.value(), shown=False)

    def secrets(self) -> list[str]:
        """The webhook URL."""
        return [self.secret("url").value()]

    async def send(self, alert: Alert, client: httpx.AsyncClient) -> Delivery:
        """POST one message."""
        return await post_json(self, client, self.secret("url").value(), message(alert))


def message(alert: Alert) -> bytes:
    """The Slack message for an alert."""
    ref = f"incident #{alert.incident_id}" if alert.incident_id is not None else "test"
    where = f"{alert.host} {alert.subject}"
    if alert.kind == Kind.RESOLVE:
        title = f":white_check_mark: Resolved: {ref} on {where}"
    elif alert.kind == Kind.ACKNOWLEDGE:
        title = f":eyes: Acknowledged: {ref} on {where}"
    else:
        icon = ICONS.get(alert.severity, ":information_source:")
        again = " (still firing)" if alert.repeat else ""
        title = f"{icon} {alert.event.replace('_', ' ').capitalize()}{again}: {ref} on {where}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": clip(title, 150)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": clip(alert.summary, TEXT_MAX)}},
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": f"*{alert.severity}* · `{alert.category}` · rule `{alert.rule}` · "
                    f"state {alert.state} · dedup `{alert.dedup_key}`"
                    + (f" · trace `{alert.trace_id}`" if alert.trace_id else ""),
                }
            ],
        },
    ]
    if alert.kind == Kind.TRIGGER:
        if alert.explain:
            text = clip("*Why:* " + alert.explain, TEXT_MAX)
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
        if alert.evidence:
            lines = clip("\n".join(alert.evidence[:10]).replace("```", "'''"), TEXT_MAX - 8)
            evidence = f"```{lines}```"
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": evidence}})
        if alert.actions:
            done = "\n".join(
                f"• {a.get('name')} {a.get('outcome')}: {a.get('reason')}"
                for a in alert.actions[-8:]
            )
            text = clip("*Actions taken:*\n" + done, TEXT_MAX)
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    return json.dumps(
        {"text": clip(title + ": " + alert.summary, TEXT_MAX), "blocks": blocks}
    ).encode()


__all__ = ["SlackSink", "message"]
