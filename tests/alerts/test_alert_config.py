"""[alerts] config: arrays of tables with file:line errors; bad sinks stop start-up naming the
key; secrets redacted in support bundles."""

from __future__ import annotations

from pathlib import Path

import pytest
from alerts_support import alerts_config, sink

from ascend_doctor.agent.alerts import build_sinks
from ascend_doctor.cli.bundle import REDACTED, redact
from ascend_doctor.core.config import AlertRouteConfig, load_config
from ascend_doctor.core.errors import ConfigError

EXAMPLE = """\
[alerts]
group_wait = 2.5

[[alerts.sinks]]
name = "oncall"
type = "pagerduty"
routing_key_env = "PD_KEY"

[[alerts.sinks]]
name = "hook"
type = "webhook"
url = "http://127.0.0.1:9/hook"
secret_file = "/etc/hook.secret"
headers = ["Authorization: Bearer literal-token", "X-Team: infra"]

[[alerts.routes]]
sinks = ["oncall"]
categories = ["device_fault"]
min_severity = "error"
"""


def test_sinks_and_routes_load_as_arrays_of_tables(tmp_path: Path) -> None:
    path = tmp_path / "doctor.toml"
    path.write_text(EXAMPLE)
    cfg = load_config(path).alerts
    assert cfg.group_wait == 2.5
    assert [(s.name, s.type) for s in cfg.sinks] == [("oncall", "pagerduty"), ("hook", "webhook")]
    assert cfg.sinks[1].headers == ("Authorization: Bearer literal-token", "X-Team: infra")
    assert cfg.routes[0].sinks == ("oncall",) and cfg.routes[0].min_severity == "error"
    assert cfg.routes[0].events == ("opened", "escalated", "resolved", "remediation_failed")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            EXAMPLE.replace('type = "webhook"', 'type = "teams"'),
            ":11: config 'alerts.sinks[1].type' is 'teams': expected one of pagerduty,",
        ),
        (
            EXAMPLE.replace(
                'routing_key_env = "PD_KEY"', 'routing_key_env = "PD_KEY"\nretries = 3'
            ),
            ":8: unknown config key 'alerts.sinks[0].retries'",
        ),
        (
            EXAMPLE.replace('min_severity = "error"', 'min_severity = "loud"'),
            ":19: config 'alerts.routes[0].min_severity' is 'loud'",
        ),
        (
            EXAMPLE.replace("[[alerts.routes]]", "[alerts.routes]"),
            "config 'alerts.routes' must be an array of tables",
        ),
    ],
)
def test_bad_sink_config_names_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "doctor.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(str(path))
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("sinks", "env", "message"),
    [
        (
            [sink("pd", "pagerduty", routing_key_env="PD_KEY")],
            {},
            "config 'alerts.sinks[0].routing_key_env': environment variable PD_KEY is not set",
        ),
        (
            [sink("pd", "pagerduty", routing_key_file="/nonexistent/key")],
            {},
            "config 'alerts.sinks[0].routing_key_file': cannot read /nonexistent/key",
        ),
        (
            [sink("chat", "slack", url_env="SLACK_URL")],
            {"SLACK_URL": "not a url https://hooks.slack.com/services/T/B/SECRETPART"},
            "config 'alerts.sinks[0].url_env' does not hold a valid URL",
        ),
        (
            [sink("am", "alertmanager", url="localhost:9093")],
            {},
            "config 'alerts.sinks[0].url' is 'localhost:9093': expected an http:// or https://",
        ),
        (
            [sink("a", "webhook", url="http://127.0.0.1/"), sink("a", "slack", url_env="X")],
            {"X": "http://127.0.0.1/"},
            "config 'alerts.sinks[1].name' is 'a': expected a unique name",
        ),
        (
            [sink("hook", "webhook", url="http://127.0.0.1/", headers=("Auth: env:NOPE",))],
            {},
            "config 'alerts.sinks[0].headers[0]': environment variable NOPE is not set",
        ),
        (
            [sink("cmd", "command", argv=("/no/such/pager",))],
            {},
            "config 'alerts.sinks[0].argv' is ['/no/such/pager']: expected an executable",
        ),
        (
            [sink("pd", "pagerduty", routing_key_env="A", routing_key_file="/k")],
            {"A": "x"},
            "config 'alerts.sinks[0].routing_key_env' and 'alerts.sinks[0].routing_key_file'",
        ),
    ],
)
def test_misconfigured_sink_is_a_start_up_error_naming_the_key(
    sinks: list[object], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        build_sinks(alerts_config(*sinks), env)  # type: ignore[arg-type]
    assert message in str(err.value)
    assert "SECRETPART" not in str(err.value)


def test_route_to_an_unknown_sink_is_a_start_up_error() -> None:
    config = alerts_config(
        sink("hook", "webhook", url="http://127.0.0.1/"),
        routes=(AlertRouteConfig(sinks=("pager",)),),
    )
    with pytest.raises(ConfigError, match=r"'alerts.routes\[0\].sinks' names 'pager'"):
        build_sinks(config, {})


def test_bundle_redacts_every_alert_secret_and_reference(tmp_path: Path) -> None:
    import tomllib

    data = tomllib.loads(EXAMPLE)
    shown = redact(data)
    hook = shown["alerts"]["sinks"][1]
    assert hook["headers"] == REDACTED
    assert hook["url"] == REDACTED and hook["secret_file"] == REDACTED
    assert shown["alerts"]["sinks"][0]["routing_key_env"] == REDACTED
    assert hook["name"] == "hook" and hook["type"] == "webhook"
    assert "literal-token" not in str(shown)
