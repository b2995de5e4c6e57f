"""Snapshot of the bundle: private copies, fingerprints, holders, free space, changes."""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import hstate_recovery
from hstate_cli.main import cli
from hstate_recovery.base.errors import InsufficientSpace, SourceChanging
from hstate_recovery.source.snapshot import take_snapshot
from sessiondb.sqlitefile.holders import lock_holders, open_holders
from tests.helpers import damage


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir(mode=0o700)
    damage.build_store(src / "state.db", sessions=2, per_session=10)
    return src / "state.db"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    d = tmp_path / "work"
    d.mkdir()
    return d


@pytest.fixture
def holder(source: Path):
    """A real process that keeps the store file open until we stop it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'rb'); "
         "print('ready', flush=True); time.sleep(120)", str(source)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_snapshot_copies_privately_with_matching_fingerprints(source, work):
    snap = take_snapshot(source, work)
    try:
        assert stat.S_IMODE(os.stat(snap.directory).st_mode) == 0o700
        assert snap.directory.parent == work
        assert stat.S_IMODE(os.stat(snap.db_copy).st_mode) == 0o600
        fp = snap.before["state.db"]
        st = os.stat(source)
        assert (fp.size, fp.inode, fp.dev, fp.mtime_ns) == (st.st_size, st.st_ino, st.st_dev,
                                                            st.st_mtime_ns)
        assert fp.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
        assert snap.db_copy.read_bytes() == source.read_bytes()
        assert snap.after == snap.before
    finally:
        snap.cleanup()
    assert list(work.iterdir()) == []


def test_inspect_leaves_no_work_files(source, work):
    assert hstate_recovery.inspect(source, work_dir=work).verdict == "healthy"
    assert list(work.iterdir()) == []


def test_holder_process_is_named_and_verdict_locked(source, holder):
    found = open_holders([source])
    assert [(h.pid, h.file) for h in found] == [(holder.pid, "state.db")]
    report = hstate_recovery.inspect(source)
    assert (report.verdict, report.data_verdict) == ("locked", "healthy")
    assert [h["pid"] for h in report.holders] == [holder.pid]
    # doctor names the holder; inspect again would be a loop
    assert report.next_command.endswith(" doctor")


def test_open_and_lock_views_see_different_holders(source, holder):
    """A plain open descriptor holds no lock: only the /proc/*/fd scan sees
    it. A WAL connection locks the -shm file: the lock table names it too."""
    assert holder.pid in [h.pid for h in open_holders([source])]
    assert holder.pid not in [h.pid for h in lock_holders(source) or []]
    script = ("import sys, apsw; c = apsw.Connection(sys.argv[1]); "
              "c.execute('SELECT count(*) FROM sessions').fetchall(); "
              "print('ready', flush=True); sys.stdin.read()")
    wal = subprocess.Popen([sys.executable, "-c", script, str(source)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert wal.stdout.readline().strip() == "ready"
        locked = [h for h in lock_holders(source) or [] if h.pid == wal.pid]
        assert {h.file for h in locked} >= {"state.db-shm"}
        assert all("apsw.Connection" in h.command for h in locked)
    finally:
        wal.kill()
        wal.wait()


def test_source_changing_during_copy_stops(source, work, tmp_path):
    before = source.read_bytes()

    def writer() -> None:  # another process appending while we copy
        with open(source, "ab") as f:
            f.write(b"\x00" * 1024)

    report = hstate_recovery.inspect(source, work_dir=work, after_copy=writer)
    assert report.verdict == "source_changing"
    assert report.changed_files == ["state.db"]
    assert list(work.iterdir()) == []
    with pytest.raises(SourceChanging):
        take_snapshot(source, work, after_copy=writer)
    assert list(work.iterdir()) == []
    # recover takes the second look beside its reads of the copy (and, row by
    # row, beside the lanes), and confirms it before anything made of the
    # copy is kept: no new file, no temporary one left
    out = tmp_path / "out"
    out.mkdir()
    for page_copy in (True, False):
        rec = hstate_recovery.recover(source, out / "new.db", work_dir=work,
                                      after_copy=writer, page_copy=page_copy)
        assert (rec.outcome, rec.exit_code, rec.output) == ("source_changing", 6, None)
        assert list(out.iterdir()) == [] and list(work.iterdir()) == []
    assert source.read_bytes()[:len(before)] == before


def test_free_space_is_checked_before_copying(source, work, tmp_path):
    with pytest.raises(InsufficientSpace) as info:
        hstate_recovery.recover(source, tmp_path / "new.db", work_dir=work, headroom=1 << 62)
    assert info.value.needed > info.value.free
    assert list(work.iterdir()) == [] and not (tmp_path / "new.db").exists()


def test_recover_proceeds_from_a_stable_snapshot_and_names_holders(source, holder, tmp_path):
    res = CliRunner().invoke(cli, ["sessions", "recover", "--source", str(source),
                                   "--output", str(tmp_path / "new.db")])
    assert res.exit_code == 0, res.output
    assert f"warning: pid {holder.pid} " in res.output
    assert damage.sql(tmp_path / "new.db", "SELECT count(*) FROM messages") == [(20,)]
