"""In-place repair of derived damage on a scratch copy, backups, optimize."""
from . import backups, online_backup
from .inplace import RepairFailed, RepairRefused, RepairReport, repair
from .online_backup import BackupFailed, BackupInfo, CreateReport, create_backup
from .optimize_store import optimize

__all__ = [
    "BackupFailed",
    "BackupInfo",
    "CreateReport",
    "RepairFailed",
    "RepairRefused",
    "RepairReport",
    "backups",
    "create_backup",
    "online_backup",
    "optimize",
    "repair",
]
