"""recover --output: the pipeline, its verification, foreign files, and
installing a recovered file.
"""
from . import pipeline
from .install import InstallReport, install_recovered, next_after_recover
from .pipeline import check_options, recover

__all__ = [
    "InstallReport",
    "check_options",
    "install_recovered",
    "next_after_recover",
    "pipeline",
    "recover",
]
