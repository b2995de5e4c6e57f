"""A writer process for the online-backup and Litestream tests.

``python -m tests.helpers.backup_workers HOME NAME [COUNT [PAUSE_S]]`` appends
messages ``NAME-<i>`` (each with a fixed-length body, so a half-written row
would show) to its own session, one commit each, and prints ``i`` on stdout
after each commit returns: a line on stdout is an acknowledgement.
``PAUSE_S`` is a pause after each acknowledgement (an agent's pace, not a
loop's).
"""
from __future__ import annotations

import sys
import time

from sessiondb import SessionDB

BODY = "x" * 300


def content(name: str, i: int) -> str:
    return f"{name}-{i}:{BODY}"


def main() -> None:
    home, name = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 10**9
    pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    db = SessionDB.open(home)
    sid = db.create_session(f"writer-{name}", source="test")
    print("ready", flush=True)
    for i in range(count):
        db.append_message(sid, {"role": "user", "content": content(name, i)})
        print(i, flush=True)
        if pause:
            time.sleep(pause)
    db.close()


if __name__ == "__main__":
    main()
