"""The words recovery's reports are made of: severities, verdicts, outcomes.

Each is a `StrEnum`, so a member is its string: JSON reports, exit-code
tables and terminal output stay byte-identical to the plain strings they
replace, and a comparison with a string from an older report still holds.
"""
from __future__ import annotations

from enum import StrEnum


class Severity(StrEnum):
    """How bad a doctor finding is; declared from best to worst."""

    OK = "ok"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"


class Verdict(StrEnum):
    """What `inspect` concludes about a bundle (``verdict``, ``data_verdict``)."""

    HEALTHY = "healthy"
    FTS_ONLY = "fts_only"
    STRUCTURAL = "structural"
    NOT_A_DATABASE = "not_a_database"
    EMPTY = "empty"
    LOCKED = "locked"
    SOURCE_CHANGING = "source_changing"
    #: ``data_verdict`` when the copy was never analysed (the source changed).
    UNKNOWN = "unknown"


class Outcome(StrEnum):
    """How `recover` ended (``RecoveryReport.outcome``)."""

    RECOVERED = "recovered"
    PARTIAL = "partial"
    NOT_RECOVERABLE = "not_recoverable"
    UNVERIFIED = "unverified"
    SOURCE_CHANGING = "source_changing"


class RepairStatus(StrEnum):
    """How `repair` ended (``RepairReport.status``)."""

    HEALTHY = "healthy"
    NEEDS_REPAIR = "needs_repair"  # check-only
    REPAIRED = "repaired"
    STRUCTURAL = "structural"  # nothing done: recover instead
