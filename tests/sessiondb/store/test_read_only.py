"""A handle opened with ``read_only=True``: it reads, refuses every write with
`ReadOnlyHandle`, and leaves the store, its sidecars and the home byte for
byte as they were (SQLite); on PostgreSQL its sessions are read-only too."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import apsw
import pytest

from sessiondb import (Cause, ReadOnlyHandle, SchemaTooOld, SessionDB, StorageError,
                       StoreNotFound)
from sessiondb.engine import migrations, record_damage
from sessiondb.index import search_index
from tests.sessiondb.rows.test_row_format import legacy_store

pytestmark = pytest.mark.both_backends


def files(root: Path) -> dict[str, str]:
    """Every file under ``root`` and the hash of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def fill(db) -> None:
    db.create_session("s1", source="test", title="first")
    db.append_messages("s1", [{"role": "user" if i % 2 else "assistant",
                               "content": f"harbour lantern {i}"} for i in range(30)])
    db.create_session("s2", source="other", title="second")
    db.append_message("s2", {"role": "user", "content": "quiet meadow"})


WRITES: list[tuple[str, Callable]] = [
    ("create_session", lambda db: db.create_session("s3", source="test")),
    ("append_message", lambda db: db.append_message("s1", {"role": "user", "content": "x"})),
    ("append_messages", lambda db: db.append_messages("s1", [{"role": "user", "content": "a"},
                                                             {"role": "user", "content": "b"}])),
    ("set_title", lambda db: db.set_title("s1", "renamed")),
    ("end_session", lambda db: db.end_session("s1")),
    ("delete_session", lambda db: db.delete_session("s2")),
    ("record_usage", lambda db: db.record_usage("s1", input_tokens=5)),
    ("acquire_lease", lambda db: db.acquire_lease("s1", "me", 30)),
    ("archive_sessions", lambda db: db.archive_sessions(["s1"])),
    ("pin_sessions", lambda db: db.pin_sessions(["s1"])),
    ("rebuild_search_index", lambda db: db.rebuild_search_index(force=True)),
]


def test_reads_answer_and_every_write_is_refused(open_store, hermes_home, backend):
    with open_store() as db:
        fill(db)
    before = files(hermes_home)
    ro = open_store(read_only=True)
    assert [h.session_id for h in ro.search("harbour", limit=50)].count("s1") == 30
    assert [s.id for s in ro.list_sessions()] == ["s2", "s1"]
    assert len(ro.get_messages("s1")) == 30 and ro.store_stats()["messages"] == 31
    for name, write in WRITES:
        with pytest.raises(ReadOnlyHandle) as caught:
            write(ro)
        assert caught.value.cause is Cause.READONLY, name
        assert caught.value.code == "storage_read_only_handle"
        assert caught.value.spooled_to is None and "read-only" in str(caught.value)
    # A write that goes around the store API meets the connection's (or the
    # server session's) own refusal.
    with pytest.raises(StorageError) as caught:
        with ro._read() as conn:
            conn.execute("UPDATE sessions SET title = 'x' WHERE id = 's1'")
    assert caught.value.cause is Cause.READONLY
    assert ro.get_session("s1").title == "first" and ro.count_messages() == 31
    ro.close()
    assert files(hermes_home) == before  # no spool, no reserve, no sidecar


@pytest.mark.sqlite_only("a server database exists or not; a missing home is a file's case")
def test_missing_store_is_not_created(tmp_path, backend):
    home = tmp_path / "nothing"
    with pytest.raises(StoreNotFound):
        SessionDB.open(home, read_only=True)
    assert not home.exists()


@pytest.mark.sqlite_only("the file and its sidecars")
@pytest.mark.parametrize("state", ["closed", "wal_left", "quarantined"])
def test_store_and_sidecars_unchanged(tmp_path, state, backend):
    path = tmp_path / "state.db"
    db = SessionDB(path)
    fill(db)
    if state != "closed":  # a killed writer's -wal and -shm, nobody holding them
        db.core.writer.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        db.append_message("s2", {"role": "user", "content": "only in the wal"})
    db.close()
    if state == "quarantined":
        record_damage(path, "found damaged in a test", "doctor")
    before = files(tmp_path)
    assert (f"{path.name}-wal" in before) is (state != "closed")
    with SessionDB(path, read_only=True) as ro:
        assert ro.quarantined is (state == "quarantined")
        assert len(ro.search("harbour", limit=50)) == 30
        assert ro.count_messages() == (31 if state == "closed" else 32)
        with pytest.raises(ReadOnlyHandle):
            ro.checkpoint()
    assert files(tmp_path) == before


@pytest.mark.sqlite_only("SQLite's file without locks")
def test_a_writer_after_the_open_is_seen_by_the_next_read(tmp_path, backend):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        fill(db)
    with SessionDB(path, read_only=True) as ro, SessionDB(path) as writer:
        assert ro.count_messages() == 31
        writer.append_message("s2", {"role": "user", "content": "new meadow"})
        assert ro.count_messages() == 32
        assert [h.session_id for h in ro.search("meadow")] == ["s2", "s2"]


@pytest.mark.sqlite_only("migrations of the SQLite file")
def test_older_schemas(tmp_path, backend):
    readable = tmp_path / "m012.db"
    with SessionDB(readable) as db:
        fill(db)
    conn = apsw.Connection(str(readable))  # as m012 left it: no graph checkpoint tables
    for table in ("graph_writes", "graph_blobs", "graph_checkpoints"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("DELETE FROM migrations WHERE name = 'm013_graph_checkpoints'")
    conn.close()
    before = files(tmp_path)
    with SessionDB(readable, read_only=True) as ro:
        assert ro.pending_migrations() == ["m013_graph_checkpoints"]
        assert len(ro.search("harbour", limit=50)) == 30 and ro.store_stats()["sessions"] == 2
    old = tmp_path / "m009.db"
    legacy_store(old)
    before = files(tmp_path)
    with pytest.raises(SchemaTooOld) as caught:
        SessionDB(old, read_only=True)
    assert caught.value.code == "storage_schema_too_old"
    assert "m010_compact_rows" in str(caught.value) and "sessions repair" in str(caught.value)
    assert files(tmp_path) == before
    assert set(migrations.READABLE_BEFORE) <= {m.__name__ for m in migrations.MIGRATIONS}


@pytest.mark.sqlite_only("FTS5's index in the file")
def test_stale_index_answers_from_the_fallback_and_stays_stale(tmp_path, backend):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        fill(db)
        with db.atomic() as conn:
            search_index.mark_stale(conn, "a test", None)
    before = files(tmp_path)
    with SessionDB(path, read_only=True) as ro:
        assert ro.search_rebuilt_on_open is None and ro.search_index_stale() is not None
        found = ro.search("meadow")
        assert [h.session_id for h in found] == ["s2"]
    assert files(tmp_path) == before
