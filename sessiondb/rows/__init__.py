"""The store's rows: how messages, sessions, leases and usage are coded,
written and read, and micro-compaction's archive.
"""
from . import checkpoints, compaction, leases, messages, pages, sessions, usage
from .codec import (EncodedMessage, MARKER_KEY, MAX_COLUMN_INT, PRIVATE_PREFIX, Persisted, ROLES,
                    ROLE_CODES, decode, TIME_RANGE_TEXT, UID_KEY, checked_time, encode, fingerprint_key,
                    fingerprint_of, fingerprint_text, kind_key, kind_text, logical_meta, new_uid,
                    new_uids, public_fields, role_key, role_text, stored_meta, strip_markers,
                    time_in_range, uid_key, uid_text)
from .compaction import (CompactionError, CompactionNotFound, CompactionResult, RestoreResult,
                         apply_compaction)
from .leases import Lease
from .messages import compact_legacy_rows, key_for
from .pages import StoredMessage
from .sessions import Session, new_session_id
from .usage import DDL, UsageRow, summary

__all__ = [
    "CompactionError",
    "CompactionNotFound",
    "CompactionResult",
    "DDL",
    "EncodedMessage",
    "Lease",
    "MARKER_KEY",
    "MAX_COLUMN_INT",
    "PRIVATE_PREFIX",
    "Persisted",
    "ROLES",
    "ROLE_CODES",
    "RestoreResult",
    "Session",
    "StoredMessage",
    "TIME_RANGE_TEXT",
    "UID_KEY",
    "UsageRow",
    "apply_compaction",
    "checked_time",
    "checkpoints",
    "compact_legacy_rows",
    "compaction",
    "decode",
    "encode",
    "fingerprint_key",
    "fingerprint_of",
    "fingerprint_text",
    "key_for",
    "kind_key",
    "kind_text",
    "leases",
    "logical_meta",
    "messages",
    "new_session_id",
    "new_uid",
    "new_uids",
    "pages",
    "public_fields",
    "role_key",
    "role_text",
    "sessions",
    "stored_meta",
    "strip_markers",
    "summary",
    "time_in_range",
    "uid_key",
    "uid_text",
    "usage",
]
