"""doctor: a list of checks, each a finding with a severity and a fix."""
from .doctor_fix import fix
from .doctor_pg import run_pg_doctor
from .model import Finding
from .run import run_doctor, worst

__all__ = ["Finding", "fix", "run_doctor", "run_pg_doctor", "worst"]
