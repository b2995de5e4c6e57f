"""PostgreSQL failures, each made real on a real server, classified into the
store's causes, explained by the copy table and spooled like SQLite's.

Held row locks (another host's transaction), a serialization failure, a
read-only database (what a hot standby answers), a full disk (a tablespace
on a tiny tmpfs) and a server stopped under a live handle; after each, the
test asserts what was stored, what was spooled and what a retry does.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import psycopg
import pytest

from sessiondb import (DiskFull, SessionDB, StorageError, StoreIOError, StoreLocked,
                       StoreReadOnly, import_spool)
from sessiondb.base.explain import describe_error
from sessiondb.importers.spool_import import spool_dir_for
from tests.helpers import tinyfs
from tests.helpers.pgserver import PgServer, UNPRIVILEGED_UID


def msg(text: str) -> dict:
    return {"role": "user", "content": text}


def contents(db: SessionDB, sid: str) -> list[str]:
    return [m["content"] for m in db.get_messages(sid)]


def spooled(db: SessionDB, sid: str) -> list[str]:
    path = spool_dir_for(db.path) / f"{sid}.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["message"]["content"] for r in lines if r.get("kind") == "message"]


@pytest.fixture
def store(pg_db_url: str, hermes_home: Path):
    opened: list[SessionDB] = []

    def _open(url: str = pg_db_url, **kw) -> SessionDB:
        db = SessionDB.open(url=url, **kw)
        opened.append(db)
        return db
    yield _open
    for db in opened:
        db.close()


def test_a_row_lock_held_by_another_host_ends_as_locked(store, pg_db_url) -> None:
    db = store(patience=0.3)
    sid = db.create_session("s", source="t")
    with psycopg.connect(pg_db_url) as other:  # another host, mid-transaction
        other.execute("SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE")
        started = time.monotonic()
        with pytest.raises(StoreLocked) as info:
            db.append_message(sid, msg("waits"))
        assert 0.25 < time.monotonic() - started < 5
        assert info.value.sqlstate == "55P03"
        assert info.value.spooled_to is None  # the caller may retry: as on SQLite
        other.rollback()
    assert contents(db, sid) == [] and spooled(db, sid) == []
    assert describe_error(info.value).actions[0].endswith("doctor")
    db.append_message(sid, msg("after"))  # the lock is gone: the write goes through
    assert contents(db, sid) == ["after"]


def _conflicting_update(db: SessionDB, url: str, attempts: list[int]) -> None:
    """One transaction at SERIALIZABLE that, on its first attempt only, meets
    a concurrent committed update of the row it then updates: 40001."""
    with db.atomic() as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        conn.execute("SELECT title FROM sessions WHERE id = 's'").fetchone()
        attempts.append(1)
        if len(attempts) == 1:
            with psycopg.connect(url, autocommit=True) as other:
                other.execute("UPDATE sessions SET title = 'theirs' WHERE id = 's'")
        conn.execute("UPDATE sessions SET title = 'ours' WHERE id = 's'")


def test_serialization_failure_is_retried_until_it_succeeds(store, pg_db_url) -> None:
    db = store()
    db.create_session("s", source="t")
    attempts: list[int] = []
    db._pg.run(lambda: _conflicting_update(db, pg_db_url, attempts))
    assert len(attempts) == 2
    assert db.get_session("s").title == "ours"


def test_serialization_failure_past_the_patience_is_locked(store, pg_db_url) -> None:
    db = store()
    db.create_session("s", source="t")

    def always_conflicting() -> None:
        _conflicting_update(db, pg_db_url, [])  # a fresh list: every attempt conflicts
    with pytest.raises(StoreLocked) as info:
        db._pg.run(always_conflicting, patience=0.2)
    assert info.value.sqlstate == "40001"
    assert db.get_session("s").title == "theirs"  # only the other host's update landed


def test_a_read_only_server_is_readonly_and_the_messages_are_spooled(store, pg_db_url,
                                                                      pg_url) -> None:
    db = store()
    sid = db.create_session("s", source="t")
    db.append_message(sid, msg("stored"))
    name = pg_db_url.split("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    standby = store()  # new connections read the setting, as on a hot standby
    with pytest.raises(StoreReadOnly) as info:
        standby.append_messages(sid, [msg("one"), msg("two")])
    err = info.value
    assert (err.cause.value, err.sqlstate) == ("readonly", "25006")
    assert spooled(db, sid) == ["one", "two"] and contents(db, sid) == ["stored"]
    failure = describe_error(err, home=db.home)
    assert "primary" in failure.summary and "--store-url" in failure.actions[0]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")
    report = import_spool(store())
    assert report.imported == 2 and contents(db, sid) == ["stored", "one", "two"]
    assert import_spool(db).imported == 0


@pytest.fixture
def tiny_tablespace(pg_db_url, pg_url, pg_server):
    """The messages table moved onto a 2 MB tmpfs (a tablespace)."""
    where = pg_server.root / f"tiny{os.getpid()}"  # a directory the server can reach
    if not tinyfs.mount_tmpfs(where):
        tinyfs.cannot_mount("mounting a tmpfs needs root or CAP_SYS_ADMIN")
    try:
        if os.geteuid() == 0:
            os.chown(where, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f"CREATE TABLESPACE tiny_{os.getpid()} LOCATION '{where}'")
        with psycopg.connect(pg_db_url, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE messages SET TABLESPACE tiny_{os.getpid()}")
        yield where
    finally:
        name = pg_db_url.split("?")[0].rsplit("/", 1)[1]
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.execute(f"DROP TABLESPACE IF EXISTS tiny_{os.getpid()}")
        tinyfs.unmount(where)


def test_a_full_server_disk_is_disk_full_and_the_messages_are_spooled(store,
                                                                      tiny_tablespace) -> None:
    db = store()
    sid = db.create_session("s", source="t")
    filler = tinyfs.fill(tiny_tablespace)
    with pytest.raises(DiskFull) as info:
        db.append_message(sid, msg("no room"))
    assert (info.value.cause.value, info.value.sqlstate) == ("disk_full", "53100")
    assert spooled(db, sid) == ["no room"] and contents(db, sid) == []
    assert "disk space" in describe_error(info.value).summary
    filler.unlink()
    assert import_spool(db).imported == 1 and contents(db, sid) == ["no room"]


# -- the server stops under a live handle, then comes back -------------------

@pytest.fixture
def own_server(pg_server):  # noqa: ARG001 (pg_server: skips when no server can run)
    server = PgServer().start()
    yield server
    server.destroy()


def test_server_restart_during_appends_spools_then_imports(own_server, hermes_home) -> None:
    from hstate_agent.persist import PersistenceFailed, TurnPersistence
    with psycopg.connect(own_server.url(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE store")
    db = SessionDB.open(url=own_server.url("store"), patience=1.0)
    try:
        sid = db.create_session("s", source="t")
        acked = [f"up{i}" for i in range(5)]
        for text in acked:
            db.append_message(sid, msg(text))
        own_server.stop("fast")
        failed = []
        for i in range(3):  # every append while the server is down: io_error, spooled
            with pytest.raises(StoreIOError) as info:
                db.append_message(sid, msg(f"down{i}"))
            assert info.value.spooled_to and info.value.cause.value == "io_error"
            failed.append(f"down{i}")
        agent = TurnPersistence(db, sid, holder="agent")  # the agent's path spools too
        turn = [msg("hstate_agent line")]
        with pytest.raises(PersistenceFailed) as pf:
            agent.begin_turn(turn)
        assert pf.value.cause == "io_error"
        assert spooled(db, sid) == failed + ["hstate_agent line"]
        assert "pg_isready" in pf.value.failure.summary
        own_server.start()
        db.append_message(sid, msg("back"))  # the same handle reconnects
        assert contents(db, sid) == acked + ["back"]
        report = import_spool(db)
        assert (report.imported, report.problems) == (4, [])
        assert contents(db, sid) == acked + ["back"] + failed + ["hstate_agent line"]
        assert import_spool(db).imported == 0 and spooled(db, sid) == []
        assert db.get_session(sid).message_count == 10
    finally:
        db.close()


def _until(condition, timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail the test past ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the writer never reached this phase"
        time.sleep(0.01)


def test_appends_racing_a_server_restart_lose_nothing(own_server, hermes_home) -> None:
    """A writer thread appends nonstop while the server restarts: each append
    is acknowledged or spooled, never both lost, and after the spool import
    every message is stored exactly once."""
    with psycopg.connect(own_server.url(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE store")
    db = SessionDB.open(url=own_server.url("store"), patience=0.5)
    try:
        sid = db.create_session("s", source="t")
        outcome: dict[str, str] = {}
        stop = threading.Event()

        def writer() -> None:
            i = 0
            while not stop.is_set():
                text = f"m{i}"
                try:
                    db.append_message(sid, msg(text))
                    outcome[text] = "acked"
                except StorageError as e:
                    outcome[text] = "spooled" if e.spooled_to else f"lost {e.cause.value}"
                i += 1
        def count(kind: str) -> int:
            return sum(1 for v in list(outcome.values()) if v == kind)

        thread = threading.Thread(target=writer)
        thread.start()
        # Each phase waits for its outcome (not a fixed time, which a loaded
        # machine can spend before the writer has appended at all).
        _until(lambda: count("acked") > 0)
        own_server.stop("immediate")
        _until(lambda: count("spooled") > 0)
        own_server.start()
        acked_before = count("acked")
        _until(lambda: count("acked") > acked_before)
        stop.set()
        thread.join(30)
        kinds = set(outcome.values())
        assert kinds <= {"acked", "spooled"}, kinds
        assert "spooled" in kinds and "acked" in kinds
        import_spool(db)
        stored = contents(db, sid)
        assert sorted(stored) == sorted(outcome) and len(stored) == len(set(stored))
    finally:
        db.close()
