"""Recovery tooling: inspect, salvage, repair and doctor for damaged stores."""
from .doctor import Finding, run_doctor

__all__ = ["Finding", "run_doctor"]
