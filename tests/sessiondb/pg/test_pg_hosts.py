"""Several hosts on one PostgreSQL store: real processes, each with its own
connection pool. Writers and readers for a fixed time (every acknowledged
message stored exactly once, no error reaching a caller), a writer killed
with SIGKILL mid-transaction (nothing acknowledged lost, its row locks
gone), and a stalled lease holder refused inside its own transaction."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessiondb import LeaseLost, SessionDB
from tests.helpers.pg_workers import SESSIONS

ROOT = Path(__file__).resolve().parents[3]


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.pg_workers", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture
def store(pg_db_url: str, hermes_home: Path):
    db = SessionDB.open(url=pg_db_url)
    yield db
    db.close()


def test_four_writers_two_readers_every_acknowledged_message_once(store, pg_db_url,
                                                                   hermes_home) -> None:
    for sid in SESSIONS:
        store.create_session(sid, source="test")
    home = str(hermes_home)
    procs = [spawn("writer", pg_db_url, home, f"w{k}", "3") for k in range(4)]
    procs += [spawn("reader", pg_db_url, home, f"r{k}", "3") for k in range(2)]
    docs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        docs.append(lines(out))
    errors = [d["error"] for ds in docs for d in ds if "error" in d]
    assert errors == []
    assert all(ds[-1].get("done") for ds in docs)  # every process ran its time out
    assert all(ds[-1]["reads"] > 0 for ds in docs[4:])
    acked = [u for ds in docs[:4] for d in ds for u in d.get("acked", [])]
    assert len(acked) > 100  # the writers really contended
    stored = []
    for sid in SESSIONS:
        rows = store.message_page(sid, limit=1_000_000)
        assert [r.key[0] for r in rows] == list(range(1, len(rows) + 1))  # no gap, no tie
        assert store.get_session(sid).message_count == len(rows)
        stored += [r.uid for r in rows]
    assert sorted(stored) == sorted(acked) and len(set(stored)) == len(stored)


def test_a_writer_killed_mid_transaction_loses_nothing_acknowledged(store, pg_db_url,
                                                                     hermes_home) -> None:
    sid = store.create_session("s", source="test")
    proc = spawn("stalled", pg_db_url, str(hermes_home), sid)
    acked, pending = [], None
    assert proc.stdout is not None
    for line in proc.stdout:
        doc = json.loads(line)
        acked += doc.get("acked", [])
        if "in_transaction" in doc:
            pending = doc["in_transaction"]
            break
    assert pending is not None and len(acked) == 20, proc.stderr.read() if proc.stderr else ""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    # The server ends the dead client's transaction: its row lock is gone, so
    # another host appends at once (within a patience of 10 s), after the 20.
    started = time.monotonic()
    store.append_message(sid, {"role": "user", "content": "next host"})
    assert time.monotonic() - started < 10
    rows = store.message_page(sid, limit=100)
    assert [r.uid for r in rows][:20] == acked and pending not in {r.uid for r in rows}
    assert [r.key[0] for r in rows] == list(range(1, 22))
    assert store.get_session(sid).message_count == 21


def test_a_stalled_lease_holder_on_another_host_is_refused(store, pg_db_url,
                                                           hermes_home) -> None:
    sid = store.create_session("s", source="test")
    clock = [1000.0]
    host_a = SessionDB.open(url=pg_db_url, clock=lambda: clock[0])
    host_b = SessionDB.open(url=pg_db_url, clock=lambda: clock[0])
    try:
        host_a.acquire_lease(sid, "a", ttl_s=30)
        host_a.append_message(sid, {"role": "user", "content": "a1"}, holder="a")
        with pytest.raises(LeaseLost):
            host_b.acquire_lease(sid, "b", ttl_s=30)  # a's lease is live
        clock[0] += 31  # host a stalls past its lease
        host_b.acquire_lease(sid, "b", ttl_s=30)
        host_b.append_message(sid, {"role": "user", "content": "b1"}, holder="b")
        with pytest.raises(LeaseLost, match="leased by 'b'"):
            host_a.append_messages(sid, [{"role": "user", "content": "a2"}], holder="a")
        assert [m["content"] for m in store.get_messages(sid)] == ["a1", "b1"]
        assert store.get_session(sid).message_count == 2
    finally:
        host_a.close()
        host_b.close()


def test_a_lease_checked_in_a_transaction_holds_off_a_takeover(store, pg_db_url,
                                                               hermes_home) -> None:
    """The lease row a write checked stays as checked until that write
    commits: a takeover from another host (its lease expired there) waits."""
    import threading

    from sessiondb.rows import leases
    sid = store.create_session("s", source="test")
    store.acquire_lease(sid, "a", ttl_s=30)
    host_b = SessionDB.open(url=pg_db_url, clock=lambda: time.time() + 60)  # a's lease is over
    took: list[float] = []
    try:
        with store.atomic() as conn:
            leases.check(conn, sid, "a", store.now())
            thread = threading.Thread(target=lambda: took.append(
                host_b.acquire_lease(sid, "b", ttl_s=30).expires_at))
            thread.start()
            thread.join(0.5)
            assert thread.is_alive() and took == []  # waiting on the checked row
            conn.execute("INSERT INTO state_meta(key, value) VALUES ('k', 'written under a')")
        thread.join(10)
        assert took and store.meta("k") == "written under a"
        with pytest.raises(LeaseLost):
            store.append_message(sid, {"role": "user", "content": "late"}, holder="a")
    finally:
        host_b.close()
