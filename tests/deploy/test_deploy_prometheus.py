"""deploy/prometheus/: the alert rules and their ``promtool test rules`` unit tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_doctor.core.events import Category, Severity

from .metric_table import SERIES_LABELS, documented, documented_series

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "ascend-doctor.rules.yml"
TESTS = PROM / "ascend-doctor.rules.test.yml"
ALERTS = {"AscendDoctorDown", "AscendIncidentEscalated", "AscendNpuUnhealthy",
          "AscendNpuErrors", "AscendRemediationBudgetExhausted"}  # fmt: skip
# what Prometheus adds to a scrape, and what the Collector makes of the doctor's resource
SCRAPE_LABELS = {"job", "instance", "service_instance_id", "le"}
PROMQL = {"sum", "max", "min", "by", "on", "or", "unless", "offset", "increase", "rate",
          "without", "and", "up", "count", "ignoring", "group_left"}  # fmt: skip


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    return subprocess.run(
        [tool, *args], capture_output=True, text=True, timeout=120, cwd=PROM, check=False
    )


def test_promtool_checks_the_rules() -> None:
    proc = _promtool("check", "rules", RULES.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in proc.stdout


def test_promtool_unit_tests_pass() -> None:
    proc = _promtool("test", "rules", TESTS.name)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


def test_every_alert_is_unit_tested_firing_and_quiet() -> None:
    doc = yaml.safe_load(TESTS.read_text())
    assert doc["rule_files"] == [RULES.name]
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in doc["tests"]:
        for case in test.get("alert_rule_test", []):
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    assert {r["alert"] for r in _rules()} == ALERTS
    assert firing == ALERTS and quiet == ALERTS


def _names(expr: str) -> set[str]:
    stripped = re.sub(r'"[^"]*"', '""', expr)
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)
    stripped = re.sub(r"\{[^}]*\}", "", stripped)
    stripped = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", stripped)
    stripped = re.sub(r"\boffset\s+\w+", "", stripped)
    return set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", stripped)) - PROMQL


def _labels(text: str) -> set[str]:
    stripped = re.sub(r'"[^"]*"', '""', text)
    names: set[str] = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", stripped):
        names |= {n.strip() for n in group.split(",") if n.strip()}
    for selector in re.findall(r"\{([^}]*)\}", stripped):
        names |= set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", selector))
    return names


def test_rules_use_the_documented_names_and_labels() -> None:
    series = documented_series()
    allowed = set().union(*(r.labels for r in documented().values())) | SERIES_LABELS
    allowed |= SCRAPE_LABELS
    for rule in _rules():
        expr = rule["expr"]
        assert _names(expr) <= series, (rule["alert"], _names(expr) - series)
        templates = " ".join([*rule.get("labels", {}).values(), *rule["annotations"].values()])
        used = _labels(expr) | set(re.findall(r"\$labels\.(\w+)", templates))
        assert used <= allowed, (rule["alert"], used - allowed)


def test_alert_labels_route_in_alertmanager() -> None:
    """The labels deploy/alertmanager.yml routes on: host always, severity a real one (or
    the series' own), category a real category, device from hw_id."""
    severities = {s.label for s in Severity}
    for rule in _rules():
        labels = rule.get("labels", {})
        assert "host" in labels, rule["alert"]
        severity = labels.get("severity")
        if severity is None:  # taken from the incident's series
            assert "severity" in _labels(rule["expr"]), rule["alert"]
        else:
            values = set(re.findall(r"\b(info|warning|error|critical)\b", severity))
            assert values and values <= severities, rule["alert"]
        if "category" in labels:
            assert labels["category"] in {c.value for c in Category}
        if "device" in labels:
            assert labels["device"] == "{{ $labels.hw_id }}"
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
