"""What every phase of recovery shares: its errors, its words and the report.
"""
from .errors import (InsufficientSpace, OutputUnreadable, RecoveryError, RecoveryIOError,
                     RecoveryUsageError, SourceChanging, SourceMissing)
from .report import INSPECT_EXIT, RecoveryReport, TableReport, write_json_exclusive
from .vocab import Outcome, RepairStatus, Severity, Verdict

__all__ = [
    "INSPECT_EXIT",
    "InsufficientSpace",
    "Outcome",
    "OutputUnreadable",
    "RecoveryError",
    "RecoveryIOError",
    "RecoveryReport",
    "RecoveryUsageError",
    "RepairStatus",
    "Severity",
    "SourceChanging",
    "SourceMissing",
    "TableReport",
    "Verdict",
    "write_json_exclusive",
]
