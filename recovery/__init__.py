"""Recovery tooling: inspect, salvage, repair and doctor for damaged stores."""
from .doctor import Finding, run_doctor
from .repairs import RepairFailed, RepairRefused, RepairReport, repair
from .base import (InsufficientSpace, RecoveryError, RecoveryUsageError, SourceChanging,
                   SourceMissing)
from .inspection import InspectReport, advice, inspect
from .lanes import LANES, LaneContext, LaneResult
from .salvage import check_options, recover
from .base import RecoveryReport
from .base import Outcome, RepairStatus, Severity, Verdict

__all__ = ["Finding", "run_doctor", "repair", "RepairReport", "RepairFailed", "RepairRefused", "inspect", "InspectReport", "recover", "RecoveryReport",
           "check_options", "advice", "LANES", "LaneContext", "LaneResult", "RecoveryError",
           "RecoveryUsageError", "SourceChanging", "SourceMissing", "InsufficientSpace",
           "Severity", "Verdict", "Outcome", "RepairStatus"]
