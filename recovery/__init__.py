"""Recovery tooling: inspect, salvage, repair and doctor for damaged stores."""
from .doctor import Finding, run_doctor
from .repair import RepairFailed, RepairRefused, RepairReport, repair
from .errors import (InsufficientSpace, RecoveryError, RecoveryUsageError, SourceChanging,
                     SourceMissing)
from .inspect import InspectReport, advice, inspect
from .lanes import LANES, LaneContext, LaneResult
from .recover import check_options, recover
from .report import RecoveryReport
from .vocab import Outcome, RepairStatus, Severity, Verdict

__all__ = ["Finding", "run_doctor", "repair", "RepairReport", "RepairFailed", "RepairRefused", "inspect", "InspectReport", "recover", "RecoveryReport",
           "check_options", "advice", "LANES", "LaneContext", "LaneResult", "RecoveryError",
           "RecoveryUsageError", "SourceChanging", "SourceMissing", "InsufficientSpace",
           "Severity", "Verdict", "Outcome", "RepairStatus"]
