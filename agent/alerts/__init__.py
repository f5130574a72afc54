"""Alerts to on-call: PagerDuty, Slack, Alertmanager, webhooks and commands, through a
durable outbox in the store, never lost, never spammed.

One file per sink behind one interface (``base.Sink``); ``engine.AlertListener`` is a store
listener that queues alerts in the outbox; ``delivery.Deliverer`` drains it in the daemon's
loop. Secrets come only from environment variables or files named by the config, are read
when an alert is sent, and are never logged or stored.

Example config::

    [alerts]
    group_wait = 5.0           # seconds before a first delivery; flaps within it send nothing
    repeat_interval = 14400.0  # re-notify an unacknowledged firing alert (0: never)

    [[alerts.sinks]]
    name = "oncall"
    type = "pagerduty"                   # role "page" by default
    routing_key_env = "PAGERDUTY_ROUTING_KEY"

    [[alerts.sinks]]
    name = "team-channel"
    type = "slack"                       # role "notify"; one message a second at most
    url_file = "/etc/ascend-doctor/slack-webhook-url"

    [[alerts.sinks]]
    name = "am"
    type = "alertmanager"
    url = "http://alertmanager.monitoring:9093"
    resend_interval = 60.0

    [[alerts.sinks]]
    name = "ticketing"
    type = "webhook"
    url = "https://tickets.example.com/hooks/ascend"
    secret_env = "ASCEND_HOOK_SECRET"    # X-Ascend-Doctor-Signature: sha256=HMAC(ts.body)
    headers = ["X-Team: inference", "Authorization: env:TICKETS_TOKEN"]

    [[alerts.sinks]]
    name = "local-script"
    type = "command"
    argv = ["/usr/local/bin/notify-oncall", "--quiet"]   # the alert JSON on stdin
    timeout = 10.0

    # Without routes: page sinks get escalated incidents and critical ones that open or whose
    # remediation failed; notify sinks get every transition. With routes, each matching route
    # adds its sinks (resolves and acknowledgements follow their trigger):
    [[alerts.routes]]
    sinks = ["oncall"]
    categories = ["device_fault", "hccl_link_error"]
    min_severity = "error"
    events = ["opened", "escalated", "remediation_failed"]

Silence a category for a while: ``ascend-doctor silence add --category npu_oom --for 2h``.
Check every sink: ``ascend-doctor alerts test``.
"""

from __future__ import annotations

from ascend_doctor.sinks import SCHEMA, SINKS, Alert, Delivery, Kind, Sink

from .delivery import Deliverer, TokenBucket
from .listener import AlertListener, build_sinks

__all__ = [
    "SCHEMA",
    "SINKS",
    "Alert",
    "AlertListener",
    "Deliverer",
    "Delivery",
    "Kind",
    "Sink",
    "TokenBucket",
    "build_sinks",
]
