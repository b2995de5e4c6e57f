"""Imports into a store: foreign formats (Hermes Agent, llm), the spool's re-
import, and the bulk import path with its index builder.
"""
from .hermes_agent_import import import_hermes_agent
from .importer import ImportResult, import_export_file
from .llm_import import import_llm_logs
from .spool_import import SpoolFileResult, SpoolImportReport, import_spool

__all__ = [
    "ImportResult",
    "SpoolFileResult",
    "SpoolImportReport",
    "import_export_file",
    "import_hermes_agent",
    "import_llm_logs",
    "import_spool",
]
