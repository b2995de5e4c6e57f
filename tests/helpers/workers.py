"""Worker processes for concurrency tests (importable under spawn)."""
from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from sessiondb import SessionDB


def appender(path: str, worker: int, count: int, session_id: str) -> dict:
    """Append ``count`` messages one commit each; report errors, never raise."""
    errors: list[str] = []
    with SessionDB(path) as db:
        for i in range(count):
            try:
                db.append_message(session_id, {"role": "user", "content": f"w{worker}-{i}",
                                               "worker": worker, "seq": i})
            except Exception:  # reported to the test, which asserts there are none
                errors.append(traceback.format_exc(limit=2))
    return {"worker": worker, "errors": errors}


def reader(path: str, session_id: str, stop_file: str, started: Any = None) -> dict:
    """Read the session until told to stop; counts must never go backwards.
    ``started`` (an Event from a multiprocessing Manager) is set after the
    first read, so a test can start its writers once the reader reads."""
    errors: list[str] = []
    reads, last = 0, 0
    with SessionDB(path) as db:
        while not Path(stop_file).exists():
            try:
                n = len(db.get_messages(session_id))
                if n < last:
                    errors.append(f"count went backwards: {last} -> {n}")
                last = n
                reads += 1
            except Exception:
                errors.append(traceback.format_exc(limit=2))
            if started is not None and reads == 1:
                started.set()
            time.sleep(0.005)
    return {"reads": reads, "errors": errors, "last": last}
