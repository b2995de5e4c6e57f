"""Imports into a store: foreign formats (Hermes Agent, llm, Claude Code and
Codex transcripts), the spool's re-import, and the bulk import path with its
index builder.
"""
from .hermes_agent_import import import_hermes_agent
from .importer import ImportResult, import_export_file
from .llm_import import import_llm_logs
from .log_import import LOG_FORMATS, LogFileResult, LogImportReport, import_logs, log_files
from .spool_import import SpoolFileResult, SpoolImportReport, import_spool

__all__ = [
    "ImportResult",
    "LOG_FORMATS",
    "LogFileResult",
    "LogImportReport",
    "SpoolFileResult",
    "SpoolImportReport",
    "import_export_file",
    "import_hermes_agent",
    "import_llm_logs",
    "import_logs",
    "log_files",
    "import_spool",
]
