"""doctor: a list of checks, each a finding with a severity and a fix."""
from .doctor_fix import FixReport, fix
from .doctor_pg import run_pg_doctor
from .model import Finding, Target
from .run import run_doctor, target, worst

__all__ = ["Finding", "FixReport", "Target", "fix", "run_doctor", "run_pg_doctor", "target",
           "worst"]
