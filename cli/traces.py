"""``ascend-doctor incidents show ID`` (the incident and its span waterfall) and
``ascend-doctor traces export`` (OTLP JSON that collectors and trace viewers load), both
from the store alone: no collector needed."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ascend_doctor.agent.telemetry.span_codec import to_otlp_json
from ascend_doctor.cli.common import open_store, state_dir_option
from ascend_doctor.core.events import Severity
from ascend_doctor.core.store import SpanRecord, Store

BAR = 32
SHOWN_ATTRS = (
    "finding.rule",
    "finding.summary",
    "remediation.decision",
    "remediation.reason",
    "verify.result",
    "verify.probe.health_status",
    "server.exit_code",
)
ROOT_ATTRS = ("incident.rule", "incident.state", "server.exit_code")


def waterfall(spans: list[SpanRecord]) -> list[str]:
    """Text lines: each span under its parent, with its offset, duration and a bar."""
    if not spans:
        return []
    t0 = min(s.start_ns for s in spans)
    t1 = max(max(s.end_ns, s.start_ns) for s in spans)
    scale = max(t1 - t0, 1)
    ids = {s.span_id for s in spans}
    children: dict[str, list[SpanRecord]] = {}
    for s in spans:
        parent = s.parent_id if s.parent_id in ids else ""
        children.setdefault(parent, []).append(s)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda x: (x.start_ns, x.span_id)):
            start = (s.start_ns - t0) / 1e9
            dur = max(0, s.end_ns - s.start_ns) / 1e9
            a = int(BAR * (s.start_ns - t0) / scale)
            b = max(a + 1, int(BAR * (s.end_ns - t0) / scale))
            bar = " " * a + "#" * (min(b, BAR) - a)
            status = "" if s.status == "unset" else f" [{s.status}]"
            name = "  " * depth + s.name
            lines.append(f"  +{start:8.3f}s {dur:8.3f}s |{bar:<{BAR}}| {name}{status}")
            for key in ROOT_ATTRS if not s.parent_id else SHOWN_ATTRS:
                if key in s.attributes:
                    pad = " " * (2 * depth + 2)
                    lines.append(f"{'':{BAR + 23}}{pad}{key}={s.attributes[key]}")
            for e in s.events:
                text = e.get("attributes", {}).get("log.record")
                if text:
                    pad = " " * (2 * depth + 2)
                    lines.append(f"{'':{BAR + 23}}{pad}> {str(text)[:160]}")
            walk(s.span_id, depth + 1)

    walk("", 0)
    return lines


def incident_spans(store: Store, incident_id: int) -> list[SpanRecord]:
    """Every stored span of an incident's trace."""
    trace_id = store.incident_trace_id(incident_id)
    return [] if trace_id is None else store.spans(trace_id)


@click.command("show")
@click.argument("incident_id", type=int)
@state_dir_option
def show(incident_id: int, state_dir: Path | None) -> None:
    """One incident: what was found, what was decided, and its trace as a waterfall."""
    store = open_store(state_dir)
    try:
        try:
            inc = store.incident(incident_id)
        except KeyError:
            raise click.ClickException(f"no incident {incident_id}") from None
        spans = incident_spans(store, incident_id)
        actions = store.actions(incident_id)
    finally:
        store.close()
    click.echo(
        f"#{inc.id} {inc.state.value} {Severity(inc.severity).label} {inc.category.value}"
        f" {inc.subject}: {inc.summary}"
    )
    click.echo(f"  rule {inc.rule}, {inc.attempts} attempt(s)")
    for a in actions:
        click.echo(f"  {a.name:28} {a.outcome.value:9} {a.reason}")
    if not spans:
        click.echo("  (no spans stored for this incident)")
        return
    click.echo(f"\ntrace {spans[0].trace_id}")
    for line in waterfall(spans):
        click.echo(line)


@click.group("traces")
def traces_group() -> None:
    """The stored traces (the doctor's and the server's request spans)."""


@traces_group.command("export")
@click.option("--incident", "incident_id", type=int, default=None, help="The incident's trace.")
@click.option("--trace", "trace_id", default=None, help="A trace by its hex id.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the OTLP JSON.",
)
@state_dir_option
def export(
    incident_id: int | None, trace_id: str | None, output: Path, state_dir: Path | None
) -> None:
    """Write a trace as OTLP JSON (an ExportTraceServiceRequest) that other tools load."""
    if (incident_id is None) == (trace_id is None):
        raise click.UsageError("give exactly one of --incident or --trace")
    store = open_store(state_dir)
    try:
        if incident_id is not None:
            spans = incident_spans(store, incident_id)
        else:
            spans = store.spans(str(trace_id).lower())
    finally:
        store.close()
    if not spans:
        what = f"incident {incident_id}" if incident_id is not None else f"trace {trace_id}"
        raise click.ClickException(f"no spans stored for {what}")
    output.write_text(json.dumps(to_otlp_json(spans), indent=1) + "\n", encoding="utf-8")
    click.echo(f"wrote {len(spans)} spans of trace {spans[0].trace_id} to {output}")


__all__ = ["export", "incident_spans", "show", "traces_group", "waterfall"]
