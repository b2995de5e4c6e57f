"""Recovery tooling: inspect, salvage, repair and doctor for damaged stores."""
from .base import (InsufficientSpace, Outcome, RecoveryError, RecoveryReport, RecoveryUsageError,
                   RepairStatus, Severity, SourceChanging, SourceMissing, Verdict)
from .doctor import Finding, run_doctor
from .inspection import InspectReport, advice, inspect
from .lanes import LANES, LaneContext, LaneResult
from .repairs import RepairFailed, RepairRefused, RepairReport, repair
from .salvage import check_options, recover

__all__ = ["Finding", "run_doctor", "repair", "RepairReport", "RepairFailed", "RepairRefused", "inspect", "InspectReport", "recover", "RecoveryReport",
           "check_options", "advice", "LANES", "LaneContext", "LaneResult", "RecoveryError",
           "RecoveryUsageError", "SourceChanging", "SourceMissing", "InsufficientSpace",
           "Severity", "Verdict", "Outcome", "RepairStatus"]
