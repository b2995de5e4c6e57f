"""The background WAL checkpointer (sessiondb/engine/checkpointer.py).

Who checkpointed is read from the thread that wrote the main database
file (in WAL mode a commit writes only the -wal), recorded by the VFS shim
in tests/helpers/ckptvfs.py; how big the WAL got from the file itself.
Waits are for events (a pass finished, a thread ended), never for time.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import apsw
import pytest

from sessiondb import InvalidInput, SessionDB, StoreReplaced
from sessiondb.engine.checkpointer import RESET_FACTOR, THREAD_NAME
from tests.helpers.ckptvfs import ThreadVFS
from tests.helpers.faultvfs import FaultVFS
from tests.reliability.checks import store_findings

_names = itertools.count()
THRESHOLD = 64  # pages; one commit of a message writes ten or twenty
ONE_COMMIT = 64  # pages, generously


@pytest.fixture
def vfs() -> Iterator[ThreadVFS]:
    shim = ThreadVFS(f"ckpt{os.getpid()}_{next(_names)}")
    yield shim
    shim.release.set()
    shim.unregister()


def text(i: int) -> dict:
    return {"role": "user", "content": f"message {i} " + "lorem ipsum dolor " * 12}


def wal_pages(path: Path) -> int:
    """Frames the -wal file has room for (32-byte header, 24 per frame)."""
    with open(f"{path}-wal", "rb") as f:
        page_size = int.from_bytes(f.read(32)[8:12], "big")  # the WAL header says
    return max(os.path.getsize(f"{path}-wal") - 32, 0) // (page_size + 24)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Sequencing: wait for another thread to get somewhere (not a timing check)."""
    deadline = time.monotonic() + 30
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


def ckpt_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_the_writer_leaves_checkpoints_to_the_thread(tmp_path: Path, open_store,
                                                     vfs: ThreadVFS) -> None:
    path = tmp_path / "state.db"
    db = open_store(path, vfs=vfs.name, checkpoint_pages=THRESHOLD)
    db._indexer.pause()  # its commits would grow the WAL between the two sizes
    assert db._writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    db.create_session("s1", source="test")
    before = len(vfs.main_writes)  # opening stamps and checkpoints the new file
    i = 0
    while db._checkpointer._thread is None:  # until a commit has woken the thread
        db.append_message("s1", text(i))
        i += 1
    stats = db.checkpoint_stats
    wait_for(lambda: stats.background >= 1 and stats.last[0] == stats.last[1] > 0,
             "a pass that copied every frame back")
    assert stats.inline == 0
    writes = vfs.main_writes[before:]
    assert writes and set(writes) == {THREAD_NAME}  # no commit wrote the database file
    size = os.path.getsize(f"{path}-wal")
    db.append_message("s1", text(i))  # every frame copied back: this commit restarts the WAL
    assert os.path.getsize(f"{path}-wal") == size
    assert wal_pages(path) >= THRESHOLD  # the file keeps its size; SQLite writes from its start
    assert set(vfs.main_writes[before:]) == {THREAD_NAME}
    assert len(db.get_messages("s1")) == i + 1


def test_a_long_run_keeps_the_wal_bounded_and_restarting(tmp_path: Path, open_store,
                                                          vfs: ThreadVFS) -> None:
    """Commits back to back never leave the thread a quiet moment to finish;
    the commit at the reset point copies what is left, so the WAL restarts."""
    path = tmp_path / "state.db"
    db = open_store(path, vfs=vfs.name, checkpoint_pages=THRESHOLD)
    db.create_session("s1", source="test")
    high = 0
    for i in range(500):  # one commit each, as an agent appends
        db.append_message("s1", text(i))
        high = max(high, wal_pages(path))
    stats = db.checkpoint_stats
    assert stats.failures == 0 and THREAD_NAME in vfs.writers()
    # At twice the reset point a commit waits for the thread's pass, then copies.
    assert high <= 2 * RESET_FACTOR * THRESHOLD + ONE_COMMIT
    assert stats.restarts >= 5
    assert len(db.get_messages("s1")) == 500 and db.quick_check() == ["ok"]


def test_a_reader_holding_the_wal_does_not_make_the_thread_spin(tmp_path: Path,
                                                                open_store) -> None:
    """A reader (Litestream holds one between its syncs) stops every PASSIVE
    pass at its read mark; the thread passes again only once another
    threshold of frames has arrived, not at every commit."""
    path = tmp_path / "state.db"
    db = open_store(path, checkpoint_pages=THRESHOLD)
    db._indexer.pause()
    db.create_session("s1", source="test")
    reader = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM messages").fetchall()  # the read mark is set here
    try:
        for i in range(300):
            db.append_message("s1", text(i))
        pages = wal_pages(path)
    finally:
        reader.execute("COMMIT")
        reader.close()
    stats = db.checkpoint_stats
    assert stats.failures == 0 and pages > 4 * THRESHOLD
    # one pass per threshold of new frames (plus quiet-spell passes), never one per commit
    assert stats.background <= pages // THRESHOLD + 10, (stats, pages)
    assert len(db.get_messages("s1")) == 300


def test_backstop_when_the_thread_cannot_open_its_connection(
        tmp_path: Path, open_store, vfs: ThreadVFS, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.db"
    vfs.refuse = True  # every open by the checkpointer thread fails
    db = open_store(path, vfs=vfs.name, checkpoint_pages=THRESHOLD)
    db.create_session("s1", source="test")
    before = len(vfs.main_writes)
    high = 0
    with caplog.at_level(logging.INFO, logger="sessiondb.engine.checkpointer"):
        for i in range(400):
            db.append_message("s1", text(i))  # never raises for the thread's failures
            high = max(high, wal_pages(path))
    stats = db.checkpoint_stats
    assert stats.failures >= 1 and stats.background == 0
    assert stats.inline >= 2  # the commits that reached the backstop checkpointed
    assert THREAD_NAME not in vfs.writers()
    assert len(vfs.main_writes) > before
    assert high <= RESET_FACTOR * THRESHOLD + ONE_COMMIT  # bounded without the thread
    assert any("background checkpoint failed" in r.getMessage() for r in caplog.records)
    assert any("a commit copied them back" in r.getMessage() for r in caplog.records)
    assert len(db.get_messages("s1")) == 400 and db.quick_check() == ["ok"]


def test_no_checkpoint_after_quarantine(tmp_path: Path, open_store, vfs: ThreadVFS) -> None:
    """The thread is on its way (held in its open) when the handle is
    quarantined; released, it must not copy the pending WAL into the file."""
    path = tmp_path / "state.db"
    db = open_store(path, vfs=vfs.name, checkpoint_pages=THRESHOLD)
    db._indexer.pause()  # its commits could run an inline checkpoint after `frozen`
    db.create_session("s1", source="test")
    vfs.release.clear()
    i = 0
    while not vfs.held.is_set():  # commits until the thread starts and waits in its open
        db.append_message("s1", text(i))
        i += 1
    os.link(path, tmp_path / "ours.db")  # the inode the handle (and thread) use
    frozen = (tmp_path / "ours.db").read_bytes()
    other = tmp_path / "other.db"
    SessionDB(other).close()
    os.replace(other, path)  # the file is replaced under the live handle
    with pytest.raises(StoreReplaced):
        db.append_message("s1", text(i))
    assert db.quarantined
    threads = ckpt_threads()
    vfs.release.set()  # the thread goes on: open, then it must see the halt
    for t in threads:
        t.join()
    db.close()
    assert THREAD_NAME not in vfs.writers()
    assert db.checkpoint_stats.background == 0
    assert (tmp_path / "ours.db").read_bytes() == frozen  # no checkpoint, not even on close


def test_close_joins_the_thread_and_closes_its_connection_first(
        tmp_path: Path, vfs: ThreadVFS) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path, vfs=vfs.name, checkpoint_pages=THRESHOLD)
    try:
        db.create_session("s1", source="test")
        for i in range(100):
            db.append_message("s1", text(i))
        thread = db._checkpointer._thread
        assert thread is not None and thread.is_alive()
    finally:
        db.close()
    assert not thread.is_alive()
    closes = [opener for kind, opener, _ in vfs.events if kind == "close"]
    assert THREAD_NAME in closes
    last_thread_close = max(n for n, c in enumerate(closes) if c == THREAD_NAME)
    writer_closes = [n for n, c in enumerate(closes) if c == "MainThread"]
    assert writer_closes and writer_closes[-1] > last_thread_close
    assert not Path(f"{path}-wal").exists()  # the writer, last out, checkpointed at close
    with SessionDB(path) as again:
        assert len(again.get_messages("s1")) == 100


def test_no_checkpointer_for_read_only_or_rollback_journal_handles(
        hermes_home: Path, tmp_path: Path) -> None:
    keeper = SessionDB.open()  # keeps the -wal/-shm alive for the read-only handle
    shim = FaultVFS(f"ckptro{os.getpid()}_{next(_names)}")
    try:
        keeper.create_session("s1", source="test")
        shim.faults.readonly = True
        with SessionDB.open(vfs=shim.name, checkpoint_pages=1) as ro:
            assert ro.checkpoint_stats is None
            assert ro.get_session("s1").id == "s1"
    finally:
        keeper.close()
        shim.unregister()
    with SessionDB(tmp_path / "d.db", journal_mode="delete", checkpoint_pages=1) as d:
        assert d.checkpoint_stats is None
        d.create_session("s1", source="test")
        d.append_message("s1", text(0))


@pytest.mark.parametrize("bad", [0, -5, 1.5, "1000", True])
def test_checkpoint_pages_is_checked_before_the_file_is_touched(tmp_path: Path, bad) -> None:
    with pytest.raises(InvalidInput, match="checkpoint_pages"):
        SessionDB(tmp_path / "state.db", checkpoint_pages=bad)
    assert not (tmp_path / "state.db").exists()


# -- processes ----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]


def run_worker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.helpers.ckpt_workers", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_fork_while_the_thread_works(tmp_path: Path) -> None:
    """The child forgets the parent's thread and connection and, using the
    inherited handle, checkpoints with a thread of its own; the parent's
    thread goes on after the fork and nothing is lost on either side."""
    done = run_worker("fork", str(tmp_path / "state.db"))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["alive_at_fork"] and report["child_exit"] == 0, done.stderr[-3000:]
    assert report["background_after"] > report["background_before"]
    assert report["counts"] == {"parent": 400, "child": 200}
    assert report["quick_check"] == ["ok"]


def test_kill9_mid_run_loses_no_acknowledged_message(tmp_path: Path) -> None:
    """Writers with a busy checkpointer are killed at seeded points of their
    run (after N acknowledgements, so the kill lands while the thread copies
    and the WAL restarts); every acknowledged message is there exactly once."""
    path, journal = tmp_path / "state.db", tmp_path / "acks.txt"
    rng = random.Random(20261130)
    acked, initial = 0, None
    for episode in range(4):
        target = acked + rng.randint(120, 320)
        proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.ckpt_workers", "append",
                                 str(path), str(journal), str(episode * 100_000)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert proc.stdout.readline().strip() == b"ready", proc.stderr.read()[-2000:]
            initial = initial or os.path.getsize(path)
            wait_for(lambda: journal.read_bytes().count(b"\n") >= target or
                     proc.poll() is not None, "acknowledgements")
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        acked = journal.read_bytes().count(b"\n")
    assert os.path.getsize(path) > initial + 256 * 1024  # the threads copied frames back
    texts = journal.read_text().splitlines()
    assert len(texts) == acked >= 480
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        stored = Counter(r[0] for r in conn.execute(
            "SELECT content FROM messages WHERE session_id = 'crash'"))
    finally:
        conn.close()
    assert [t for t in texts if stored[t] != 1] == []
    assert store_findings(path) == []
