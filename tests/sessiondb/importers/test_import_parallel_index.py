"""The import's parallel index build (import_index.ParallelIndex over
sessiondb/index/fts_build.py): into an empty
store both indexes are built by builder processes beside it and copied in;
the answers are those of an index built in batches, and any commit by
another connection during the import makes it fall back to batches."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from sessiondb import SessionDB
from sessiondb.maintenance.export import export_to_path
from sessiondb.index.fts_build import PREFIX, ParallelBuild
from sessiondb.importers.importer import import_export_file
from sessiondb.index.search_index import INDEXES, TEXT_INDEXES
from tests.helpers import foreign_dbs

pytestmark = pytest.mark.sqlite_only("FTS5 shadow tables of a SQLite file copied in")

WORDS = "alpha beta gamma delta epsilon zeta".split()
QUERIES = ("alpha", "beta gamma", '"gamma delta"', "lph", "psilo", "word17", "tool7", "block",
           "日本語", "unique")


def make_export(tmp_path: Path, sessions: int = 3, per: int = 700) -> Path:
    with SessionDB(tmp_path / "src" / "state.db") as src:
        for s in range(sessions):
            sid = src.create_session(f"s{s}", source="bench")
            src.append_messages(sid, [
                {"role": ("user", "assistant", "tool")[i % 3],
                 "content": (f"{WORDS[i % 6]} {WORDS[(i // 6) % 6]} word{i} tool{i % 9} 日本語"
                             if i % 5 else [{"type": "text", "text": f"block {WORDS[i % 6]} word{i}"}]),
                 **({"tool_call_id": f"c{i}"} if i % 3 == 2 else {})} for i in range(per)])
        out = tmp_path / "e.jsonl"
        export_to_path(src.core, None, "jsonl", out)
    return out


def answers(db: SessionDB) -> dict[str, list[tuple[str, int]]]:
    return {q: [(h.session_id, h.message_id, h.snippet, h.via) for h in db.search(q, limit=1000)]
            for q in QUERIES}  # ranked: bm25 reads the index's sizes and averages too


def integrity_checked(path: Path) -> None:
    conn = apsw.Connection(str(path))
    try:
        for table in INDEXES:  # the index's own structure (answers are compared apart)
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 0)")
    finally:
        conn.close()


def test_an_empty_store_gets_a_parallel_index_with_the_batches_answers(open_store, tmp_path):
    out = make_export(tmp_path)
    path = tmp_path / "new" / "state.db"
    db = open_store(path, background_index=False)
    result = import_export_file(db, out)
    assert (result.index_build, result.search_index, result.index_backlog) == \
        ("parallel", "caught_up", 0)
    assert result.messages_added == 2100
    backlog = db.index_backlog()
    assert backlog.empty and backlog.watermark == 2100
    assert not list(path.parent.glob(PREFIX + "*"))  # the scratch is gone
    integrity_checked(path)
    parallel = answers(db)
    assert [q for q, hits in parallel.items() if not hits] == ["unique"]
    assert len(parallel["alpha"]) > 300
    db.rebuild_search_index(force=True)  # the same rows indexed in batches
    assert db.index_backlog().empty
    assert answers(db) == parallel
    # the copied index is a live one: later writes are indexed in batches on top
    db.append_messages("s1", [{"role": "user", "content": "unique zeta"}])
    db.catch_up_index()
    assert [h.session_id for h in db.search("unique")] == ["s1"]
    integrity_checked(path)


APPEND = ("import sys\nfrom sessiondb import SessionDB\n"
          "with SessionDB(sys.argv[1], background_index=False) as db:\n"
          "    db.create_session('other', source='x')\n"
          "    db.append_messages('other', [{'role': 'user', 'content': 'unique other'}])\n")


def test_another_process_writing_before_the_copy_makes_the_import_index_in_batches(open_store,
                                                                            tmp_path):
    out = make_export(tmp_path)
    path = tmp_path / "new" / "state.db"
    db = open_store(path, background_index=False)
    wrote = []

    def progress_for(total, label="importing"):
        if label == "indexing":  # the rows are in, the builders' index not yet copied
            subprocess.run([sys.executable, "-c", APPEND, str(path)], check=True,
                           cwd=Path(__file__).resolve().parents[3], timeout=60)
            wrote.append(total)
        return None

    result = import_export_file(db, out, progress_for=progress_for)
    assert wrote
    assert (result.index_build, result.search_index) == ("batches", "caught_up")
    assert db.count_messages() == 2101 and db.index_backlog().empty
    assert [h.session_id for h in db.search("unique")] == ["other"]
    assert len(db.search("word17", limit=10)) == 3
    assert not list(path.parent.glob(PREFIX + "*"))
    integrity_checked(path)


def test_a_store_with_messages_indexes_in_batches(open_store, tmp_path):
    out = make_export(tmp_path, sessions=1, per=50)
    db = open_store(tmp_path / "new" / "state.db", background_index=False)
    db.create_session("mine", source="x")
    db.append_messages("mine", [{"role": "user", "content": "alpha mine"}])
    result = import_export_file(db, out)
    assert (result.index_build, result.search_index) == ("batches", "caught_up")
    alpha = sum(1 for i in range(50) if i % 6 == 0 or (i % 5 and (i // 6) % 6 == 0))
    assert len(db.search("alpha", limit=100)) == 1 + alpha


class Stop(Exception):
    pass


def test_an_import_failing_mid_write_stops_the_builders_and_removes_the_scratch(open_store,
                                                                               tmp_path):
    out = make_export(tmp_path)
    path = tmp_path / "new" / "state.db"
    db = open_store(path, background_index=False)
    seen = []

    def progress_for(total, label="importing"):
        def step(n):
            seen.append(list(path.parent.glob(PREFIX + "*")))
            raise Stop()
        return step

    with pytest.raises(Stop):
        import_export_file(db, out, progress_for=progress_for)
    assert seen and seen[0]  # the builders had started beside the store
    assert not list(path.parent.glob(PREFIX + "*"))
    # the first chunk's transaction was rolled back; the index is untouched
    assert db.count_messages() == 0 and db.index_backlog().watermark == 0
    result = import_export_file(db, out)  # a re-run builds it in parallel again
    assert (result.index_build, result.messages_added) == ("parallel", 2100)
    integrity_checked(path)


def test_an_index_too_big_to_copy_in_one_short_transaction_is_built_in_batches(
        open_store, tmp_path, monkeypatch, caplog):
    import logging
    from sessiondb.importers import import_index
    caplog.set_level(logging.INFO, logger="sessiondb.importers.import_index")
    out = make_export(tmp_path, sessions=1, per=300)
    path = tmp_path / "new" / "state.db"
    db = open_store(path, background_index=False)
    monkeypatch.setattr(import_index, "MIN_MESSAGES", 0)
    monkeypatch.setattr(import_index, "MAX_COPY_BYTES", 16 << 10)  # the scratch files are bigger
    result = import_export_file(db, out)
    assert (result.index_build, result.search_index) == ("batches", "caught_up")
    assert "too big to copy" in caplog.text  # built, then not copied
    assert not list(path.parent.glob(PREFIX + "*"))
    monkeypatch.setattr(import_index, "MAX_COPY_BYTES", 256 << 20)
    monkeypatch.setattr(import_index, "MAX_MESSAGES", 299)  # 300 planned: no builders at all
    db2 = open_store(tmp_path / "new2" / "state.db", background_index=False)
    assert import_export_file(db2, out).index_build == "batches"
    assert answers(db2) == answers(db)


def builder_pids(table: str) -> list[int]:
    """This process's own builder children for ``table`` (from /proc)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if ppid == os.getpid() and b"sessiondb.index.fts_build" in argv and table.encode() in argv:
            found.append(int(d.name))
    return found


@pytest.mark.parametrize("victim", TEXT_INDEXES)  # (the term table has no builder)
def test_kill_9_of_a_builder_mid_import_leaves_a_correct_store(open_store, tmp_path, victim):
    out = make_export(tmp_path)
    path = tmp_path / "new" / "state.db"
    db = open_store(path, background_index=False)
    killed: list[int] = []

    def progress_for(total, label="importing"):
        def step(n):
            if not killed:  # the first chunk is committed: the builders are reading
                for pid in builder_pids(victim):
                    os.kill(pid, signal.SIGKILL)  # our own child, by its pid
                    killed.append(pid)
        return step if label == "importing" else None

    result = import_export_file(db, out, progress_for=progress_for)
    assert killed
    # the import noticed (no report from that builder) and indexed in batches
    assert (result.index_build, result.search_index, result.messages_added) == \
        ("batches", "caught_up", 2100)
    assert db.index_backlog().empty and db.count_messages() == 2100
    assert not list(path.parent.glob(PREFIX + "*"))
    integrity_checked(path)
    kept = answers(db)
    db.rebuild_search_index(force=True)
    assert answers(db) == kept


def test_another_process_writing_mid_rows_makes_the_import_index_in_batches(open_store,
                                                                            tmp_path):
    out = make_export(tmp_path)
    path = tmp_path / "new" / "state.db"
    db = open_store(path, background_index=False)
    writer: list[subprocess.Popen] = []

    def progress_for(total, label="importing"):
        def step(n):
            if not writer:  # inside a batch: it commits between two of them
                writer.append(subprocess.Popen([sys.executable, "-c", APPEND, str(path)],
                                               cwd=Path(__file__).resolve().parents[3]))
        if label == "indexing":  # the rows are in: the other process has written
            assert writer[0].wait(timeout=60) == 0
        return step if label == "importing" else None

    result = import_export_file(db, out, progress_for=progress_for)
    assert writer
    assert (result.index_build, result.search_index) == ("batches", "caught_up")
    assert db.count_messages() == 2101 and db.index_backlog().empty
    assert [h.session_id for h in db.search("unique")] == ["other"]
    integrity_checked(path)


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_foreign_store_is_never_changed_by_the_builder_path(tmp_path):
    """A Hermes Agent state.db (its own messages table and FTS5 index):
    the import refuses it before any builder starts, and builders pointed
    straight at it (past every check) only read it, fail, and leave it
    byte for byte as it was."""
    from click.testing import CliRunner
    from hstate_cli.main import cli
    out = make_export(tmp_path, sessions=1, per=50)
    home = tmp_path / "theirs"
    home.mkdir()
    foreign_dbs.build_hermes_agent(home / "state.db", sessions=3, messages=20)
    before = digest(home)
    res = CliRunner().invoke(cli, ["--home", str(home), "sessions", "import", str(out)])
    assert res.exit_code == 1 and res.output.startswith("Error: ")
    assert digest(home) == before and not list(home.glob(PREFIX + "*"))
    with ParallelBuild(home / "state.db", TEXT_INDEXES, follow=False) as build:
        assert build.finish(60) is None  # no text view of ours: every builder failed
    assert digest(home) == before and not list(home.glob(PREFIX + "*"))


def test_a_store_holding_messages_starts_no_builder(open_store, tmp_path):
    out = make_export(tmp_path, sessions=1, per=600)
    path = tmp_path / "new" / "state.db"
    db = open_store(path, background_index=False)
    db.create_session("mine", source="x")
    db.append_messages("mine", [{"role": "user", "content": "alpha mine"}])
    db.catch_up_index()
    seen: list[list[Path]] = []

    def progress_for(total, label="importing"):
        return lambda n: seen.append(list(path.parent.glob(PREFIX + "*")))

    result = import_export_file(db, out, progress_for=progress_for)
    assert seen and not any(seen) and result.index_build == "batches"
    assert [h.session_id for h in db.search("mine")] == ["mine"]


def test_a_small_import_starts_no_builder(open_store, tmp_path):
    out = make_export(tmp_path, sessions=1, per=1999)  # below MIN_MESSAGES
    path = tmp_path / "new" / "state.db"
    db = open_store(path, background_index=False)
    seen: list[list[Path]] = []
    result = import_export_file(db, out, progress_for=lambda total, label="importing": (
        lambda n: seen.append(list(path.parent.glob(PREFIX + "*")))))
    assert seen and not any(seen)
    assert (result.index_build, result.search_index) == ("batches", "caught_up")
