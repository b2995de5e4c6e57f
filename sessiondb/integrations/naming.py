"""A framework's session or thread id as one of our session ids, and the
store a caller named (a handle, a file, or the default home)."""
from __future__ import annotations

import hashlib
import os
from typing import Any

from ..base import InvalidInput, validate_session_id
from ..face import StoreFace
from ..store import SessionDB


def store_session_id(external_id: Any, prefix: str) -> str:
    """``external_id`` itself when it is a valid session id of ours (a uuid,
    ``user-42``, ...); otherwise ``PREFIX-`` and 32 hex digits of its
    SHA-256, stable across processes, so any string the framework allows
    names one session."""
    if not isinstance(external_id, str) or not external_id:
        raise InvalidInput(f"a session or thread id must be a non-empty string, "
                           f"not {external_id!r:.60}")
    try:
        return validate_session_id(external_id)
    except InvalidInput:
        digest = hashlib.sha256(external_id.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{prefix}-{digest[:32]}"


def open_store(db: StoreFace | str | os.PathLike[str] | None) -> tuple[StoreFace, bool]:
    """(the store, whether the caller of this function owns it and must
    close it): a handle is used as it is, a path opens that file, None
    opens the default home's store (``$HERMES_HOME``, ``$HERMES_STORE_URL``)."""
    if isinstance(db, StoreFace):
        return db, False
    if db is None:
        return SessionDB.open(), True
    if isinstance(db, (str, os.PathLike)):
        return SessionDB(db), True
    raise InvalidInput(f"db must be a SessionDB, a path or None, not {type(db).__name__}")


__all__ = ["store_session_id", "open_store"]
