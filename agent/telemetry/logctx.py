"""The doctor's log records carry the trace and span ids of the span they were written in.

``setup_logging`` puts this filter on the doctor's handler; the format shows
``trace_id=... span_id=...`` only when the record was written inside a span.
"""

from __future__ import annotations

import logging

from opentelemetry import trace


class TraceContextFilter(logging.Filter):
    """Adds ``trace_id``, ``span_id`` and ``trace_ctx`` (the printable form) to records."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate; never drops a record."""
        ctx = trace.get_current_span().get_span_context()
        trace_id = span_id = text = ""
        if ctx.is_valid:
            trace_id, span_id = f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
            text = f" trace_id={trace_id} span_id={span_id}"
        record.trace_id = trace_id  # read by formatters
        record.span_id = span_id
        record.trace_ctx = text
        return True


__all__ = ["TraceContextFilter"]
