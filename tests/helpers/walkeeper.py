"""Run as a separate process: a live writer whose newest messages are only in
its -wal (never checkpointed), kept open until told to stop.

    python -m tests.helpers.walkeeper PATH N

Appends N messages to session "kept", prints ``ready``, then waits for a
line on stdin (or EOF) and exits without a checkpoint.
"""
from __future__ import annotations

import os
import sys

from sessiondb import SessionDB


def main(path: str, n: int) -> None:
    db = SessionDB(path, checkpoint_pages=1 << 30)  # nothing leaves the -wal
    db.create_session("kept", source="test")
    for i in range(n):
        db.append_messages("kept", [{"role": "user", "content": f"newest {i}"}])
    print("ready", flush=True)
    sys.stdin.readline()
    os._exit(0)  # as a crash would: no close, no checkpoint


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
