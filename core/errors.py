"""The one exception tree of the doctor.

Messages quote the key and the value, e.g.
``config 'remediation.min_max_model_len' is 'abc': expected an integer``.
"""

from __future__ import annotations


class DoctorError(Exception):
    """Base of every error the doctor raises on purpose."""


class ConfigError(DoctorError):
    """A configuration file or value is invalid (start-up error)."""


class RuleError(DoctorError):
    """A rule file or rule is invalid (start-up error)."""


class CollectorError(DoctorError):
    """A collector failed to run or to parse what it read."""

    def __init__(self, message: str, *, raw: str = "", evidence: str = "") -> None:
        super().__init__(message)
        self.raw = raw
        """What the source printed, kept for whoever debugs the parser."""
        self.evidence = evidence
        """Text for the rules to read (a dcmi error line), '' when there is none."""


class CaptureError(CollectorError, ValueError):
    """A profile capture file is not what its format says (a ``ValueError`` too, as parsers'
    callers catch both alike)."""


class SupervisorError(DoctorError):
    """The supervised server could not be started or stopped."""


class RemediationError(DoctorError):
    """A remediation action could not be carried out."""


class StoreError(DoctorError):
    """The state store is unusable (wrong schema, corrupt, unwritable)."""


class AlertError(DoctorError):
    """An alert could not be delivered, or names a sink that does not exist."""


class TelemetryError(DoctorError):
    """A telemetry payload could not be read, or an export failed."""


__all__ = [
    "AlertError",
    "CollectorError",
    "ConfigError",
    "DoctorError",
    "RemediationError",
    "RuleError",
    "StoreError",
    "SupervisorError",
    "TelemetryError",
]
