"""kill -9 in the middle of prune, optimize and flag changes: the store stays healthy
with the old or the new state (real processes, real SIGKILL)."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from hstate_recovery.source import liveread
from sessiondb import SessionDB
from sessiondb.maintenance import lifecycle as maintenance

ROOT = Path(__file__).resolve().parents[3]


def worker(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.helpers.maintenance_workers", *args],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True, **kw)


def build(home: Path, sessions: int = 8, per: int = 30) -> dict[str, int]:
    """'old' sessions in parent/child chains of two, plus 'keep' sessions."""
    counts = {}
    with SessionDB.open(home) as db:
        for i in range(sessions):
            parent = f"old{i - 1}" if i % 2 else None
            for sid, src in ((f"old{i}", "old"), (f"keep{i}", "keep")):
                db.create_session(sid, source=src, parent_session_id=parent if src == "old"
                                  else None)
                db.append_messages(sid, [{"role": "user", "content": f"{sid} text {j} " * 40}
                                         for j in range(per)])
                counts[sid] = per
    return counts


def healthy(home: Path) -> None:
    conn = apsw.Connection(str(home / "state.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def test_kill_during_prune_leaves_whole_sessions_and_lineage(hermes_home):
    counts = build(hermes_home)
    proc = worker("prune", str(hermes_home))
    assert proc.wait(timeout=60) == -9
    healthy(hermes_home)
    with SessionDB.open(hermes_home) as db:
        left = {s.id: s for s in db.list_sessions(archived=None, limit=100)}
        assert all(f"keep{i}" in left for i in range(8))
        gone = [sid for sid in counts if sid not in left]
        assert gone and len(gone) < 8  # killed after the first batch, not before or after
        for sid, s in left.items():
            assert len(db.get_messages(sid)) == counts[sid]  # whole, or not there
            if sid.startswith("old") and int(sid[3:]) % 2:
                assert s.parent_session_id == f"old{int(sid[3:]) - 1}"  # never orphaned
        assert db.search("text", session_id=gone[0]) == []
        assert db.search("keep3")


STEPS = ("copy", "merge_search", "vacuum_into", "verify", "promote", "checkpoint")


@pytest.mark.parametrize("step", STEPS)
def test_kill_during_optimize_leaves_a_healthy_store(hermes_home, step):
    build(hermes_home, sessions=6)
    with SessionDB.open(hermes_home) as db:
        maintenance.prune(db.core, maintenance.PruneFilter(source="old"))
    digest = _digest(hermes_home)
    proc = worker("optimize", str(hermes_home), step)
    assert proc.wait(timeout=120) == -9
    healthy(hermes_home)
    assert _digest(hermes_home) == digest
    with SessionDB.open(hermes_home) as db:
        assert len(db.search("keep2", limit=100)) == 30
    # the next optimize finishes (the leftover scratch directory is doctor's to clean)
    proc = worker("optimize", str(hermes_home), "never")
    assert proc.wait(timeout=120) == 0
    healthy(hermes_home)
    assert _digest(hermes_home) == digest


def test_kill_inside_the_promotion(hermes_home):
    build(hermes_home, sessions=40, per=60)
    with SessionDB.open(hermes_home) as db:
        maintenance.prune(db.core, maintenance.PruneFilter(source="old"))
    digest = _digest(hermes_home)
    for delay in ("0.002", "0.02", "0.1"):
        proc = worker("optimize", str(hermes_home), "promote-mid", delay)
        proc.wait(timeout=120)
        healthy(hermes_home)
        assert _digest(hermes_home) == digest
        with SessionDB.open(hermes_home) as db:
            assert len(db.search("keep2", limit=100)) == 60


def test_kill_while_flags_change(hermes_home):
    build(hermes_home, sessions=4)
    proc = worker("flags", str(hermes_home))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    proc.kill()
    proc.wait(timeout=30)
    healthy(hermes_home)
    with SessionDB.open(hermes_home) as db:
        flags = {s.id: maintenance.flags_of(db.core, s.id)
                 for s in db.list_sessions(archived=None, limit=100)}
    # one transaction per operation over every session: all alike, never a mix
    assert len({(f.pinned, f.archived_at is not None) for f in flags.values()}) == 1


def _digest(home: Path) -> str:
    conn = liveread.open_readonly(home / "state.db")
    try:
        return liveread.canonical_digest(conn)
    finally:
        conn.close()


def test_recover_carries_the_flags_over_and_the_carver_knows_them(hermes_home, tmp_path):
    from hstate_recovery.schema.layouts import KNOWN_LAYOUTS, best_fit
    from hstate_recovery.salvage.pipeline import recover
    build(hermes_home, sessions=2, per=3)
    with SessionDB.open(hermes_home) as db:
        maintenance.pin(db.core, ["keep0"])
        maintenance.archive(db.core, ["old1"])
    recover(hermes_home / "state.db", tmp_path / "out.db")
    with SessionDB(tmp_path / "out.db") as out:
        assert maintenance.flags_of(out.core, "keep0").pinned
        assert maintenance.flags_of(out.core, "old1").archived_at is not None
    layout, score = best_fit(["20260101_000000_ab12cd34", 1, 1.7e9],
                             ["text", "integer", "real"], KNOWN_LAYOUTS)
    assert layout.table == "session_flags" and score == 1.0
