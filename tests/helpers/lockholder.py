"""Run as a separate process: hold a store's write lock until told to stop.

    python -m tests.helpers.lockholder PATH

Prints ``locked`` once BEGIN IMMEDIATE succeeded, then waits for a line on
stdin (or EOF) and rolls back. A real process, so the lock is a real one.
"""
from __future__ import annotations

import sys

import apsw


def main(path: str) -> None:
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE)
    conn.set_busy_timeout(5000)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    sys.stdin.readline()
    conn.execute("ROLLBACK")
    conn.close()


if __name__ == "__main__":
    main(sys.argv[1])
