"""Contention, CI size (a few seconds), and the regression test for a
checkpoint meeting another connection's checkpoint."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw
import pytest

from sessiondb import Cause, SessionDB, StoreLocked
from sessiondb import classify
from tests.reliability import contention


def test_four_writers_two_readers_lose_nothing(tmp_path: Path):
    summary = contention.run(tmp_path / "c", seconds=3.0, seed=5, min_rows=300)
    assert summary["findings"] == []
    assert summary["acked_rows"] == summary["stored_rows"] > 1000
    assert summary["writes_locked"] == 0  # 3 s never exhausts the 10 s patience
    assert summary["checkpoints_busy"] == 0
    assert summary["checkpoints"] > 0 and summary["reads"] > 0
    if summary["searcher"]:  # the store has search: it searched throughout
        assert summary["searches"] > 0


class _PausingFile(apsw.VFSFile):
    def __init__(self, vfs: "_PausingVFS", name, flags) -> None:
        super().__init__("", name, flags)
        self.vfs, self.main = vfs, bool(flags[0] & apsw.SQLITE_OPEN_MAIN_DB)

    def xWrite(self, data, offset: int) -> None:
        if self.main and self.vfs.pause_main_writes:
            self.vfs.inside.set()
            self.vfs.release.wait(30)
        super().xWrite(data, offset)


class _PausingVFS(apsw.VFS):
    """Stops a connection inside its checkpoint's first database write."""

    def __init__(self) -> None:
        self.pause_main_writes = False
        self.inside, self.release = threading.Event(), threading.Event()
        self.name = "pausing_ckpt"
        super().__init__(self.name, "")

    def xOpen(self, name, flags):
        return _PausingFile(self, name, flags)


def test_checkpoint_waits_out_another_checkpoint(tmp_path: Path):
    """Found by the contention run: SQLITE_BUSY from a PASSIVE checkpoint
    that met another one reached callers at once as `locked`."""
    path = tmp_path / "state.db"
    vfs = _PausingVFS()
    other = None
    with SessionDB(path) as db:
        db.create_session("s1", source="t")
        db.append_messages("s1", [{"role": "user", "content": f"m{i}"} for i in range(50)])
        other = apsw.Connection(str(path), vfs=vfs.name)
        other.execute("SELECT count(*) FROM messages").fetchall()  # joins the WAL
        vfs.pause_main_writes = True
        busy = threading.Thread(target=lambda: other.wal_checkpoint(
            mode=apsw.SQLITE_CHECKPOINT_PASSIVE))
        busy.start()
        try:
            assert vfs.inside.wait(30)
            with pytest.raises(StoreLocked) as info:
                db.checkpoint(patience=0)  # no patience: the typed locked error
            assert classify(info.value) is Cause.LOCKED
            result: list = []
            waiter = threading.Thread(target=lambda: result.append(db.checkpoint(patience=30)))
            waiter.start()
            time.sleep(0.2)  # let it meet the busy checkpointer (sequencing, not timing)
            vfs.pause_main_writes = False
            vfs.release.set()
            waiter.join(30)
            busy.join(30)
            assert result and result[0][0] >= 0
        finally:
            vfs.release.set()
            busy.join(30)
            other.close()
            vfs.unregister()
        assert db.quick_check() == ["ok"]
