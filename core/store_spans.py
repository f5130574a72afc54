"""The store's spans: every finished span, the doctor's own (one trace per incident, the
server's lifecycle) and the server's request spans received over OTLP. Part of
:class:`ascend_doctor.core.store.Store`."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ascend_doctor.core.store_base import StoreBase


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One finished span as stored (OTLP ids as lowercase hex)."""

    trace_id: str
    span_id: str
    parent_id: str
    """Empty for a root span."""
    name: str
    kind: str
    """``internal``, ``server``, ``client``, ``producer`` or ``consumer``."""
    start_ns: int
    end_ns: int
    status: str
    """``unset``, ``ok`` or ``error: <description>``."""
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    """Each ``{"name", "time_ns", "attributes"}``."""
    resource: dict[str, Any]
    source: str
    """``doctor`` (our own spans) or ``server`` (the server's request spans)."""
    incident_id: int | None = None


SERVER_SPANS_KEPT = 50_000  # the server's request spans kept, newest first


class SpansMixin(StoreBase):
    """Spans."""

    def add_spans(self, spans: Sequence[SpanRecord]) -> None:
        """Store finished spans (a span stored twice by the same source keeps its last
        version); the server's request spans are bounded to SERVER_SPANS_KEPT."""
        if not spans:
            return
        with self._tx() as db:
            db.executemany(
                # a span is replaced only by its own source: an OTLP client cannot overwrite
                # the doctor's incident spans by reusing their ids
                "INSERT INTO spans (trace_id, span_id, parent_id, name, kind,"
                " start_ns, end_ns, status, attributes, events, resource, source, incident_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (trace_id, span_id) DO UPDATE SET parent_id = excluded.parent_id,"
                " name = excluded.name, kind = excluded.kind, start_ns = excluded.start_ns,"
                " end_ns = excluded.end_ns, status = excluded.status,"
                " attributes = excluded.attributes, events = excluded.events,"
                " resource = excluded.resource, incident_id = excluded.incident_id"
                " WHERE spans.source = excluded.source",
                [
                    (
                        s.trace_id,
                        s.span_id,
                        s.parent_id,
                        s.name,
                        s.kind,
                        s.start_ns,
                        s.end_ns,
                        s.status,
                        json.dumps(s.attributes, default=str),
                        json.dumps(s.events, default=str),
                        json.dumps(s.resource, default=str),
                        s.source,
                        s.incident_id,
                    )
                    for s in spans
                ],
            )
            if any(s.source == "server" for s in spans):
                db.execute(
                    "DELETE FROM spans WHERE source = 'server' AND rowid NOT IN (SELECT rowid"
                    " FROM spans WHERE source = 'server' ORDER BY start_ns DESC LIMIT ?)",
                    (SERVER_SPANS_KEPT,),
                )

    def spans(self, trace_id: str) -> list[SpanRecord]:
        """Every stored span of a trace, in start order."""
        rows = self._db.execute(
            "SELECT * FROM spans WHERE trace_id = ? ORDER BY start_ns, span_id", (trace_id,)
        )
        return [_span(r) for r in rows]

    def incident_trace_id(self, incident_id: int) -> str | None:
        """The trace of an incident, once any of its spans is stored."""
        row = self._db.execute(
            "SELECT trace_id FROM spans WHERE incident_id = ? LIMIT 1", (incident_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def traces(self, *, source: str | None = None, limit: int = 200) -> list[SpanRecord]:
        """The root span of the newest traces (those whose root is stored), newest first."""
        where = "parent_id = ''" + (" AND source = ?" if source else "")
        args: list[Any] = [source] if source else []
        rows = self._db.execute(
            f"SELECT * FROM spans WHERE {where} ORDER BY start_ns DESC LIMIT ?", [*args, limit]
        )
        return [_span(r) for r in rows]


def _span(row: sqlite3.Row) -> SpanRecord:
    return SpanRecord(
        trace_id=row["trace_id"],
        span_id=row["span_id"],
        parent_id=row["parent_id"],
        name=row["name"],
        kind=row["kind"],
        start_ns=row["start_ns"],
        end_ns=row["end_ns"],
        status=row["status"],
        attributes=json.loads(row["attributes"]),
        events=json.loads(row["events"]),
        resource=json.loads(row["resource"]),
        source=row["source"],
        incident_id=row["incident_id"],
    )


__all__ = ["SERVER_SPANS_KEPT", "SpanRecord", "SpansMixin"]
