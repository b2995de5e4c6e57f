"""Files, modes, pragmas, the version gate and migrations."""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable

import apsw
import pytest

from sessiondb import InvalidInput, SchemaTooNew, SessionDB, StorageError, StoreCorrupt, UnsafeSQLiteVersion
from sessiondb.engine import migrations
from sessiondb.base import policy
from tests.helpers.pgserver import UNPRIVILEGED_UID


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_home_and_files_are_private(db, hermes_home, sid):
    db.append_message(sid, {"role": "user", "content": "secret"})
    assert mode(hermes_home) == 0o700
    for suffix in ("", "-wal", "-shm"):
        f = Path(f"{db.path}{suffix}")
        assert f.exists(), suffix
        assert mode(f) == 0o600, suffix


def test_profile_lives_under_profiles(open_store, hermes_home):
    db = open_store(profile="work")
    assert db.path == hermes_home / "profiles" / "work" / "state.db"
    assert mode(hermes_home / "profiles" / "work") == 0o700
    with pytest.raises(InvalidInput):
        open_store(profile="../escape")


def test_home_is_resolved_at_call_time(open_store, tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "later"))
    db = open_store()
    assert db.path == tmp_path / "later" / "state.db"


def test_pragmas(db):
    with db._read() as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    w = db._writer
    assert w.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert w.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert w.execute("PRAGMA journal_size_limit").fetchone()[0] == policy.JOURNAL_SIZE_LIMIT
    assert db.meta("sqlite_version") == apsw.sqlite_lib_version()


def test_new_files_get_the_policy_page_and_old_files_keep_theirs(open_store, tmp_path):
    # 2 KiB (policy.set_page_size says why 4 KiB was measured and not kept)
    new = open_store(tmp_path / "new.db")
    assert new._writer.execute("PRAGMA page_size").fetchone()[0] == policy.PAGE_SIZE == 2048
    old_path = tmp_path / "old.db"
    conn = apsw.Connection(str(old_path))
    conn.execute("PRAGMA page_size=4096; PRAGMA journal_mode=WAL; CREATE TABLE t(x)")
    conn.close()
    old = open_store(old_path)  # an existing file is migrated, never re-paged
    assert old._writer.execute("PRAGMA page_size").fetchone()[0] == 4096
    sid = old.create_session("s1", source="t")
    old.append_messages(sid, [{"role": "user", "content": "kept"}])
    assert [m["content"] for m in old.get_messages(sid)] == ["kept"]


def test_wal_file_is_never_downgraded(open_store, db):
    path = db.path
    db.close()
    with pytest.raises(StorageError, match="refusing to downgrade"):
        open_store(path, journal_mode="delete")
    assert open_store(path).journal_mode() == "wal"


def test_delete_mode_only_when_asked(open_store, tmp_path):
    db = open_store(tmp_path / "nfs.db", journal_mode="delete")
    assert db.journal_mode() == "delete"


@pytest.mark.parametrize("version, bad", [
    ("3.6.23", False), ("3.7.0", True), ("3.40.1", True), ("3.44.5", True), ("3.44.6", False),
    ("3.50.6", True), ("3.50.7", False), ("3.51.2", True), ("3.51.3", False), ("3.54.1", False),
])
def test_version_band(version, bad):
    assert policy.in_wal_reset_band(version) is bad


def test_version_gate_refuses_to_open(monkeypatch, tmp_path):
    monkeypatch.setattr(policy, "sqlite_library_version", lambda: "3.45.1")
    with pytest.raises(UnsafeSQLiteVersion) as info:
        SessionDB(tmp_path / "x.db")
    assert info.value.code == "storage_unsafe_sqlite"
    assert not (tmp_path / "x.db").exists()


def test_migrations_from_empty_and_reopen(open_store, tmp_path):
    path = tmp_path / "m.db"
    db = open_store(path)
    names = [m.__name__ for m in migrations.MIGRATIONS]
    with db._read() as conn:
        assert migrations.applied(conn) == names
        assert migrations.pending(conn) == []
    db.create_session("keep", source="x")
    db.close()
    again = open_store(path)
    assert again.get_session("keep").source == "x"
    with again._read() as conn:
        assert migrations.applied(conn) == names


def test_pending_is_read_only(tmp_path):
    conn = apsw.Connection(str(tmp_path / "empty.db"))
    assert migrations.pending(conn) == [m.__name__ for m in migrations.MIGRATIONS]
    assert migrations.applied(conn) == []
    assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0


def test_schema_from_the_future_is_refused(open_store, db):
    with db.atomic() as conn:
        conn.execute("INSERT INTO migrations VALUES ('m999_future', 0)")
    path = db.path
    db.close()
    with pytest.raises(SchemaTooNew, match="m999_future"):
        open_store(path)


def test_directory_path_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidInput, match="is a directory"):
        SessionDB(tmp_path)


def test_non_database_file_is_corrupt(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    before = junk.read_bytes()
    with pytest.raises(StoreCorrupt):
        SessionDB(junk)
    assert junk.read_bytes() == before


def _unreadable_is_a_clear_error(folder: Path) -> None:
    f = folder / "locked.db"
    SessionDB(f).close()
    f.chmod(0)
    with pytest.raises(StorageError):
        SessionDB(f)


def test_unreadable_file_is_a_clear_error(tmp_path):
    """As root (CI) file modes bind nobody, so the check runs in a forked
    child that dropped to an unprivileged uid, in a folder that uid owns."""
    if os.geteuid() != 0:
        _unreadable_is_a_clear_error(tmp_path)
        return
    folder = Path(tempfile.mkdtemp(prefix="unprivileged-"))
    try:
        os.chown(folder, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        run_unprivileged(lambda: _unreadable_is_a_clear_error(folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_unprivileged(check: Callable[[], None]) -> None:
    """``check`` in a forked child running as `UNPRIVILEGED_UID` (modules
    already imported stay usable: the interpreter's own files need not be
    readable by that uid); what it raised comes back as the failure."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        code = 0
        try:
            os.setgroups([])
            os.setgid(UNPRIVILEGED_UID)
            os.setuid(UNPRIVILEGED_UID)
            check()
        except BaseException as e:  # pytest's failures are BaseExceptions
            os.write(write, f"{type(e).__name__}: {e}".encode()[:8000])
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, said or f"child ended with {status}"


def test_close_is_idempotent_and_closed_handle_refuses(db):
    db.close()
    db.close()
    with pytest.raises(StorageError, match="closed"):
        db.list_sessions()
