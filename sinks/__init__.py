"""How an alert reaches on-call: the alert document every sink renders and the sinks
(PagerDuty, Slack, Alertmanager, a webhook, a command). Importing this package registers
every sink type in ``SINKS``. When and what to send is the daemon's (``agent/alerts``)."""

from . import alertmanager, command, pagerduty, slack, webhook
from .base import SINKS, Sink
from .model import SCHEMA, Alert, Delivery, Kind

__all__ = [
    "SCHEMA",
    "SINKS",
    "Alert",
    "Delivery",
    "Kind",
    "Sink",
    "alertmanager",
    "command",
    "pagerduty",
    "slack",
    "webhook",
]
