"""A second process for the search fail-open tests (importable under spawn)."""
from __future__ import annotations

import os
import traceback

from sessiondb import SessionDB


def second_holder(path: str, ready, go, done, results) -> None:
    """Hold the store open; after ``go``, append and search; report; wait for ``done``."""
    try:
        with SessionDB(path) as db:
            db.append_message("shared", {"role": "user", "content": "warmup from the second process"})
            ready.set()
            go.wait(120)
            rid = db.append_message("shared", {"role": "user",
                                               "content": "kilowatt written after the detach"})
            hits = db.search("kilowatt")
            results.put({"pid": os.getpid(), "rid": rid, "stale": db.search_index_stale(),
                         "hits": [(h.message_id, h.via) for h in hits], "error": None})
            done.wait(120)
    except Exception:  # reported to the test, which asserts there is none
        results.put({"error": traceback.format_exc()})
        ready.set()
