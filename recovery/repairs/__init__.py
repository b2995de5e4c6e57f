"""In-place repair of derived damage on a scratch copy, backups, optimize."""
from . import backups
from .inplace import RepairFailed, RepairRefused, RepairReport, repair
from .optimize_store import optimize

__all__ = [
    "RepairFailed",
    "RepairRefused",
    "RepairReport",
    "backups",
    "optimize",
    "repair",
]
