"""The recovered file: sinks that write rows in the store's or the source's
schema, the bulk path, and the search index built or reused.
"""
from . import image_copy, search_reuse
from .bulk import fill_search
from .foreign_write import ForeignSink, ForeignWrite, HeaderValues, LOST_SUFFIX
from .rebuild import JSON_COLUMNS, StoreSink, WriteStats
from .sink import RowSink

__all__ = [
    "ForeignSink",
    "ForeignWrite",
    "HeaderValues",
    "JSON_COLUMNS",
    "LOST_SUFFIX",
    "RowSink",
    "StoreSink",
    "WriteStats",
    "fill_search",
    "image_copy",
    "search_reuse",
]
