"""recover --output: the pipeline, its verification, foreign files, and
installing a recovered file or a backup.
"""
from . import pipeline
from .install import InstallReport, install_recovered, next_after_recover
from .pipeline import check_options, recover
from .restore import RestoreRefused, RestoreReport, restore_backup

__all__ = [
    "InstallReport",
    "RestoreRefused",
    "RestoreReport",
    "check_options",
    "install_recovered",
    "next_after_recover",
    "pipeline",
    "recover",
    "restore_backup",
]
