"""recover's fast paths on a sound copy give exactly what the slow ones give.

Three of them (`recover(..., fast_paths=False)` turns them all off): a
sound store of ours copied page for page (`hstate_recovery.salvage.page_copy`;
``page_copy=False`` turns it alone off, so the other two can be seen), the
backup lane's batches copied from its image in one statement each
(`hstate_recovery.output.image_copy`), and inspect's quick_check run beside
that lane or that copy (`hstate_recovery.salvage.early_check`). Each test
recovers the same source both ways and compares every table of the two
outputs and the reports' per-table counts, lanes, loss and verdicts.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import apsw
import pytest

import hstate_recovery
from sessiondb import SessionDB
from tests.helpers import damage

VARYING = {"migrations", "state_meta"}  # applied_at times and the generation stamp


def _digest(path: Path) -> dict[str, tuple[int, str]]:
    """(rows, hash of every row in rowid order) of every table of ``path``."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        out = {}
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                    "ORDER BY name").fetchall():
            try:
                rows = conn.execute(f'SELECT rowid, * FROM "{name}" ORDER BY rowid').fetchall()
            except apsw.SQLError:  # WITHOUT ROWID: in key order
                rows = conn.execute(f'SELECT * FROM "{name}"').fetchall()
            if name in VARYING:
                rows = [r[:2] for r in rows]  # the keys only
            out[name] = (len(rows), hashlib.sha256(repr(rows).encode()).hexdigest())
        return out
    finally:
        conn.close()


def _essence(report: Any, pages: bool = False) -> dict[str, Any]:
    """What must not depend on the path taken: the report without timings,
    paths and the lanes' own statistics. A page copy (``pages``) verifies
    with checks of its own, and copies ``state_meta`` with the pages (the
    lanes write the new store's own)."""
    doc = report.to_dict()
    if pages:
        doc.pop("verification")
        doc["tables"]["state_meta"].pop("copied")
    for key in ("timings", "output", "requested_output", "fingerprints", "report_path",
                "lane_stats"):
        doc.pop(key, None)
    doc["inspect"] = {k: v for k, v in doc["inspect"].items()
                      if k not in ("elapsed_s", "free_disk", "fingerprints")}
    doc["verification"] = {k: v for k, v in (doc.get("verification") or {}).items()
                           if k != "seconds"}
    return doc


def _both(src: Path, tmp_path: Path, pages: bool = False, **kw: Any) -> tuple[Any, Any]:
    """The source recovered with the fast paths (the page copy only with
    ``pages``) and without; both outputs compared."""
    reports = []
    for fast in (True, False):
        out = tmp_path / f"out-{'fast' if fast else 'slow'}.db"
        reports.append(hstate_recovery.recover(src, out, fast_paths=fast, allow_partial=True,
                                               page_copy=pages, **kw))
    fast_report, slow_report = reports
    assert fast_report.output is not None and slow_report.output is not None
    assert _digest(Path(fast_report.output)) == _digest(Path(slow_report.output))
    assert _essence(fast_report, pages) == _essence(slow_report, pages)
    return fast_report, slow_report


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> damage.Truth:
    """3,000 messages: two batches of the backup lane (BATCH_ROWS is 2,000)."""
    path = tmp_path_factory.mktemp("fast") / "state.db"
    return damage.build_store(path, sessions=6, per_session=500, deterministic=True)


def _copied_by_statement(report: Any) -> int:
    return report.lane_stats["backup"].get("rows_copied_by_statement", 0)


def test_healthy_store_same_output_and_report_both_ways(pristine, tmp_path):
    src = damage.private_copy(pristine.path, tmp_path)
    fast, slow = _both(src, tmp_path)
    assert fast.outcome == "recovered" and fast.lanes_run == ["backup"]
    assert fast.tables["messages"].copied == 3000
    assert fast.tables["messages"].lanes == {"backup": 3000}
    # the fast path was taken for every row; the slow one for none
    assert _copied_by_statement(fast) == 3000 + 6  # the messages and the sessions
    assert _copied_by_statement(slow) == 0
    assert "inspect_quick_check_s" in fast.timings and fast.inspect["quick_check"]["ok"]
    assert fast.search_index["method"] == slow.search_index["method"] == "copied"


def test_sound_store_copied_page_for_page(pristine, tmp_path):
    """The same rows, counts and report as the lanes give; the new file is
    the snapshot page for page, verified as such, with its search index."""
    src = damage.private_copy(pristine.path, tmp_path)
    before = damage.bundle_hashes(src)
    fast, slow = _both(src, tmp_path, pages=True)
    assert damage.bundle_hashes(src) == before
    assert fast.lane_stats["backup"]["page_copy"] and "page_copy" not in slow.lane_stats["backup"]
    assert fast.outcome == "recovered" and fast.verification["checks"]["pages_equal"]
    assert fast.tables["messages"].copied == 3000 and fast.search_index["method"] == "copied"
    assert sum(s["messages_recovered"] for s in fast.sessions.values()) == 3000
    assert not list(tmp_path.glob(".*recovering*"))  # no temporary name, no sidecar left
    new = Path(fast.output)
    assert damage.sql(new, "PRAGMA integrity_check") == [("ok",)]
    assert damage.sql(new, "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'the'")


def test_a_store_with_its_wal_is_copied_by_the_backup_api(pristine, tmp_path):
    """A source whose -wal holds commits (a store still open): the copy's WAL
    is folded into the copy (never the source's), the backup API writes the
    new file, and it is compared with the copy byte for byte."""
    src = damage.private_copy(pristine.path, tmp_path)
    with SessionDB(src) as db:
        db.create_session("late", source="test")
        db.append_messages("late", [{"role": "user", "content": "late"}])
        crashed = damage.copy_open_bundle(db, tmp_path / "crash", with_shm=False)
    assert Path(f"{crashed}-wal").stat().st_size > 0
    before = damage.bundle_hashes(crashed)
    rep = hstate_recovery.recover(crashed, tmp_path / "new.db", work_dir=tmp_path)
    assert damage.bundle_hashes(crashed) == before
    stats = rep.lane_stats["backup"]
    assert stats["page_copy"] and not stats["linked"] and rep.outcome == "recovered"
    assert rep.verification["checks"]["pages_equal"] and rep.tables["messages"].copied == 3001
    assert damage.sql(Path(rep.output), "SELECT count(*) FROM messages")[0][0] == 3001


@pytest.mark.parametrize("change", ["json", "counter", "orphan", "unique"])
def test_what_the_lanes_would_rewrite_is_never_copied_by_page(pristine, tmp_path, change):
    """A value the row-by-row path quarantines, a session counter it
    recounts, a message whose session is gone, a constraint taken out of
    the schema: the page copy declines, and the lanes decide as before."""
    src = damage.private_copy(pristine.path, tmp_path)
    if change == "json":
        damage.sql(src, "UPDATE messages SET meta = '{not json' WHERE id = 2500")
    elif change == "counter":
        damage.sql(src, "UPDATE sessions SET message_count = 1 WHERE rowid = 2")
    elif change == "orphan":
        damage.sql(src, "PRAGMA foreign_keys=OFF; DELETE FROM sessions WHERE rowid = 3")
    else:
        _without_unique_uid(src)
    fast, _slow = _both(src, tmp_path, pages=True)
    assert "page_copy" not in fast.lane_stats.get("backup", {})


def test_plain_messages_with_empty_meta_go_by_statement(tmp_path):
    # Messages with no extra keys are stored with m012's empty meta ('', not
    # JSON text): the fast path takes them too (it once sent every such batch
    # down the per-row path).
    db = SessionDB(tmp_path / "src.db")
    db.create_session("s", source="t")
    db.append_messages("s", [{"role": "user" if i % 2 else "assistant", "content": f"hi {i}"}
                             for i in range(2500)])
    db.close()
    conn = apsw.Connection(str(tmp_path / "src.db"), flags=apsw.SQLITE_OPEN_READONLY)
    assert conn.execute("SELECT count(*) FROM messages WHERE meta = ''").fetchone() == (2500,)
    conn.close()
    fast, slow = _both(tmp_path / "src.db", tmp_path)
    assert fast.tables["messages"].copied == 2500
    assert _copied_by_statement(fast) == 2500 + 1  # the messages and the session
    assert _copied_by_statement(slow) == 0


def _without_unique_uid(path: Path) -> None:
    """Take ``UNIQUE (session_id, uid)`` out of a test-built store (its schema
    text and its index), then VACUUM so no page is left orphaned: a sound file
    whose messages may repeat a key the new store's schema rejects."""
    conn = apsw.Connection(str(path))
    try:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages'").fetchone()
        bare = re.sub(r",\s*UNIQUE \(session_id, uid\)", "", sql)
        assert bare != sql
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'messages'", (bare,))
        conn.execute("DELETE FROM sqlite_master WHERE name = 'sqlite_autoindex_messages_1'")
        conn.execute("PRAGMA writable_schema=OFF")
    finally:
        conn.close()
    conn = apsw.Connection(str(path))
    try:
        conn.execute("VACUUM")
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


def test_duplicate_keys_fall_back_to_the_per_row_path(pristine, tmp_path):
    """Rows of the second batch repeat a (session, uid) of the first: that
    batch's statement inserts fewer rows than it holds, is rolled back, and
    its rows go one by one (first copy kept), exactly as without fast paths."""
    src = damage.private_copy(pristine.path, tmp_path)
    _without_unique_uid(src)
    damage.sql(src, "INSERT INTO messages(session_id, uid, position, role, content_kind, "
                    "content, timestamp, meta, fingerprint) SELECT session_id, uid, "
                    "position + 100000, role, content_kind, content, timestamp, meta, "
                    "fingerprint FROM messages WHERE id % 100 = 0")
    assert damage.sql(src, "SELECT count(*) FROM messages")[0][0] == 3030
    fast, slow = _both(src, tmp_path)
    assert fast.tables["messages"].copied == 3000  # every duplicate kept out, both ways
    # the first batch (rowids 1-2000) in one statement, the one with duplicates not
    assert _copied_by_statement(fast) == 2000 + 6


def test_malformed_json_is_cleaned_as_before(pristine, tmp_path):
    """A value the per-row path replaces (and quarantines) keeps its batch off
    the fast path; the other batch still takes it."""
    src = damage.private_copy(pristine.path, tmp_path)
    damage.sql(src, "UPDATE messages SET meta = '{not json' WHERE id = 2500")
    damage.sql(src, "UPDATE messages SET tool_calls = 'NaN' WHERE id = 2600")  # Python parses it
    fast, slow = _both(src, tmp_path)
    assert fast.quarantined_values == slow.quarantined_values == 1
    assert fast.tables["messages"].copied == 3000
    assert _copied_by_statement(fast) == 2000 + 6


def test_damage_only_quick_check_sees_gives_the_same_outcome(pristine, tmp_path):
    """An index leaf destroyed: every table still reads whole and the search
    index checks pass, so the backup lane starts beside quick_check; the
    check then calls the copy damaged, and that lane's file is thrown away:
    the lanes run again on the final verdict, as without fast paths."""
    src = damage.private_copy(pristine.path, tmp_path)
    leaf = damage.pages_of(src, "messages_in_order", "leaf")[3]
    damage.smash_page(src, leaf)
    fast, slow = _both(src, tmp_path)
    assert fast.verdict_before == slow.verdict_before == "structural"
    assert fast.inspect["quick_check"]["ok"] is False
    assert "inspect_quick_check_s" in fast.timings  # it ran beside the first backup lane
    assert "backup" not in fast.lane_stats or not fast.lane_stats["backup"]["applicable"]
    assert fast.tables["messages"].copied == slow.tables["messages"].copied
    assert fast.lanes_run == slow.lanes_run and fast.lanes_run[0] == "backup"
    assert not list(tmp_path.glob(".*recovering*"))  # the thrown-away file is gone


def test_foreign_file_takes_rows_one_by_one(tmp_path):
    """A file we did not write is recovered in its own schema; its sink
    leaves image batches to the per-row path, and the source is unchanged."""
    src_dir = tmp_path / "src"
    src_dir.mkdir(mode=0o700)
    src = src_dir / "logs.db"
    conn = apsw.Connection(str(src))
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    with conn:
        conn.executemany("INSERT INTO notes(body) VALUES (?)", [(f"n{i}",) for i in range(2500)])
    conn.close()
    before = damage.bundle_hashes(src)
    fast, slow = _both(src, tmp_path)
    assert damage.bundle_hashes(src) == before
    assert fast.tables["notes"].copied == 2500 and _copied_by_statement(fast) == 0
    shutil.rmtree(src_dir)


def test_rows_of_megabytes_same_both_ways(pristine, tmp_path):
    """Batches are cut by bytes as well as rows (a 5 MB and a 3 MB message
    each end one): the rows and counts do not depend on where the cuts fall."""
    src = damage.private_copy(pristine.path, tmp_path)
    damage.sql(src, "UPDATE messages SET content = ? WHERE id = 10", ("x" * (5 << 20),))
    damage.sql(src, "UPDATE messages SET content = ? WHERE id = 1200", ("y" * (3 << 20),))
    fast, slow = _both(src, tmp_path)
    assert fast.outcome == "recovered" and fast.tables["messages"].copied == 3000
    assert _copied_by_statement(fast) == 3000 + 6


def test_a_failed_write_stops_the_check_and_leaves_nothing(pristine, tmp_path):
    """The output's disk fails while quick_check runs beside the lanes: the
    typed error as before, no file left, and no check thread still running."""
    from tests.helpers.damagevfs import recover_on_failing_disk

    src = damage.private_copy(pristine.path, tmp_path)
    before = damage.bundle_hashes(src)
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    error = recover_on_failing_disk(src, tmp_path / "new.db", work, name="fail-writes-fast",
                                    after=200)
    assert error.cause.value == "io_error"
    assert not [t for t in threading.enumerate() if t.name == "quick_check"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "work"]
    assert not list(work.iterdir())
    assert damage.bundle_hashes(src) == before
