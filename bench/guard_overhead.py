"""What the containment checks cost per write transaction.

Prints the time of the guard's checks alone (stat of the file and its
-wal, a pread of the header, PRAGMA application_id) beside the time of a
whole one-message append, both on a real file in a temp directory.

    .venv/bin/python bench/guard_overhead.py [N]
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from sessiondb import SessionDB


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, SessionDB(Path(tmp) / "state.db") as db:
        db.create_session("s", source="bench")
        guard, conn = db._guard, db._writer
        start = time.perf_counter()
        for _ in range(n):
            guard.before_write()
            guard.check_in_transaction(conn)
        checks = (time.perf_counter() - start) / n
        start = time.perf_counter()
        for i in range(n):
            db.append_message("s", {"role": "user", "content": f"m{i}"})
        append = (time.perf_counter() - start) / n
    print(f"guard checks per write transaction: {checks * 1e6:8.1f} us")
    print(f"one-message append (incl. checks):  {append * 1e6:8.1f} us")
    print(f"share of an append:                 {checks / append * 100:8.1f} %")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
