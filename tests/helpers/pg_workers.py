"""Worker processes for the PostgreSQL multi-host tests: each is a "host"
with its own store handle and connection pool, run as
``python -m tests.helpers.pg_workers ROLE URL HOME ...``; it prints one JSON
line per acknowledged write (flushed), so a parent that kills it knows
exactly what was acknowledged."""
from __future__ import annotations

import json
import random
import sys
import time
import traceback

from sessiondb import SessionDB
from sessiondb.rows.codec import encode

SESSIONS = ("shared-a", "shared-b")


def say(**doc: object) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def writer(url: str, home: str, name: str, seconds: float) -> None:
    """Batches of 1-3 messages to a random shared session until time is up."""
    rng = random.Random(name)
    with SessionDB.open(home, url=url, pool_size=2) as db:
        end, i = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            batch = [{"role": "user", "content": f"{name}-{i + k}"}
                     for k in range(rng.randint(1, 3))]
            try:
                db.append_messages(rng.choice(SESSIONS), batch)
            except Exception:  # noqa: BLE001 (reported: the test requires none)
                say(error=traceback.format_exc(limit=4))
                return
            say(acked=[m["_db_uid"] for m in batch])
            i += len(batch)
    say(done=True)


def reader(url: str, home: str, name: str, seconds: float) -> None:
    """Whole loads and pages of the shared sessions, checking their order."""
    with SessionDB.open(home, url=url, pool_size=2) as db:
        end, reads = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            try:
                for sid in SESSIONS:
                    rows = db.message_page(sid, limit=100_000)
                    keys = [r.key for r in rows]
                    uids = [r.uid for r in rows]
                    if keys != sorted(keys) or len(set(uids)) != len(uids):
                        say(error=f"{sid}: rows out of order or duplicated")
                        return
                    db.list_sessions()
                reads += 1
            except Exception:  # noqa: BLE001 (reported: the test requires none)
                say(error=traceback.format_exc(limit=4))
                return
    say(done=True, reads=reads)


def stalled(url: str, home: str, sid: str) -> None:
    """Acknowledge appends one by one, then hold a write transaction open
    (a row inserted, not committed) until killed."""
    with SessionDB.open(home, url=url) as db:
        for i in range(20):
            m = {"role": "user", "content": f"acked-{i}"}
            db.append_message(sid, m)
            say(acked=[m["_db_uid"]])
        with db.atomic() as conn:
            enc = encode({"role": "user", "content": "never committed"}, index=0)
            db.insert_encoded(conn, sid, [enc])
            say(in_transaction=enc.uid)
            time.sleep(600)


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "stalled":
        stalled(*args)
    else:
        {"writer": writer, "reader": reader}[role](args[0], args[1], args[2], float(args[3]))
