"""In-place repair of derived damage on a scratch copy, backups, optimize."""
from . import backups, online_backup
from .inplace import RepairFailed, RepairRefused, RepairReport, repair
from .backups import backup_dir
from .online_backup import (DEFAULT_KEEP, BackupFailed, BackupInfo, CreateReport, create_backup,
                            list_backup_infos, verify_backup)
from .optimize_store import optimize

__all__ = [
    "BackupFailed",
    "BackupInfo",
    "CreateReport",
    "DEFAULT_KEEP",
    "RepairFailed",
    "RepairRefused",
    "RepairReport",
    "backup_dir",
    "backups",
    "create_backup",
    "list_backup_infos",
    "online_backup",
    "optimize",
    "repair",
    "verify_backup",
]
