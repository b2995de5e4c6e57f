"""`hermes sessions repair`: derived damage only, backup first, verified promotion,
structural damage refused with recover commands, and the attempt ledger."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.repairs.backups import list_backups, make_backup
from hstate_recovery.source.liveread import open_readonly
from hstate_recovery.repairs.inplace import Ledger, RepairFailed, RepairRefused, file_fingerprint
from hstate_recovery.repairs.inplace import repair as recovery_repair
from sessiondb import SessionDB
from sessiondb.index.search_index import triggers_attached
from tests.helpers.cliparse import parse_hermes
from tests.helpers.search_damage import junk_fts_blocks, junk_pages
from tests.helpers.stores import (fill_home, held_by_another_process, make_old_schema,
                                  mark_stale, raw_sql, results, sha)


def repair(*args: str):
    return CliRunner().invoke(cli, ["sessions", "repair", *args])


def test_fts_damage_is_repaired_exactly_and_backed_up(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    expected = results(hermes_home)
    assert junk_fts_blocks(path) > 0
    damaged = sha(path)
    check = repair("--check-only", "--json")
    assert check.exit_code == 3
    assert json.loads(check.output)["status"] == "needs_repair"
    assert sha(path) == damaged  # --check-only changed nothing
    res = repair("--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["status"] == "repaired"
    backup = Path(doc["backup"]["path"])
    assert backup.parent == hermes_home / "backups"
    assert stat.S_IMODE(backup.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    conn = apsw.Connection(str(backup), flags=apsw.SQLITE_OPEN_READONLY)
    try:  # the backup holds the damaged state, messages included
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 120
    finally:
        conn.close()
    assert results(hermes_home) == expected
    assert repair("--json").exit_code == 0
    assert json.loads(repair("--json").output)["status"] == "healthy"
    assert not list(hermes_home.glob(".hermes-scratch-*"))


def test_backups_are_deduplicated_and_bounded(hermes_home: Path) -> None:
    path = fill_home(hermes_home, n=10)
    where = hermes_home / "backups"
    conn = open_readonly(path)
    try:
        first = make_backup(conn, path, where, keep=2)
        again = make_backup(conn, path, where, keep=2)
    finally:
        conn.close()
    assert again.reused and again.path == first.path and len(list_backups(where)) == 1
    for i in range(3):
        with SessionDB.open(hermes_home) as db:
            db.append_message("shared", {"role": "user", "content": f"more {i}"})
        conn = open_readonly(path)
        try:
            made = make_backup(conn, path, where, keep=2)
        finally:
            conn.close()
        assert not made.reused
    assert len(list_backups(where)) == 2
    assert first.path not in [str(p) for p in list_backups(where)]


def test_missing_triggers_and_stale_marker(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    raw_sql(path, "DROP TRIGGER messages_search_log_ai")  # a change-log trigger
    res = repair("--no-backup", "--json")
    doc = json.loads(res.output)
    assert res.exit_code == 0 and doc["problems"] == ["search sync triggers missing"]
    assert doc["backup"] is None and not (hermes_home / "backups").exists()
    with SessionDB.open(hermes_home) as db:
        with db._read() as conn:
            assert triggers_attached(conn)
        rid = db.append_message("shared", {"role": "user", "content": "zulu after repair"})
        assert [h.message_id for h in db.search("zulu")] == [rid]
    mark_stale(path)
    res = repair()
    assert res.exit_code == 0 and "fts_stale" in res.output and "repaired" in res.output
    with SessionDB.open(hermes_home) as db:
        assert db.search_index_stale() is None


def test_pending_migrations_are_applied(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    expected = results(hermes_home)
    make_old_schema(path)
    res = repair("--json")
    assert res.exit_code == 0
    assert json.loads(res.output)["problems"] == ["pending migration m004_search_index"]
    conn = open_readonly(path)
    try:
        assert conn.execute("SELECT name FROM migrations WHERE name = 'm004_search_index'"
                            ).fetchall() == [("m004_search_index",)]
    finally:
        conn.close()
    assert results(hermes_home) == expected


def test_structural_damage_is_refused_with_recover_commands(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    junk_pages(path, "messages")
    before = sha(path)
    res = repair()
    assert res.exit_code == 4
    assert "never repaired in place" in res.output
    commands = [line.strip() for line in res.output.splitlines()
                if line.strip().startswith("hermes ")]
    assert len(commands) == 2 and "--inspect-only" in commands[0]  # no spool: no import
    for command in commands:
        parse_hermes(command)  # the parser accepts every one
    assert sha(path) == before
    assert not (hermes_home / "backups").exists()


def test_refuses_while_another_process_holds_the_store(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    mark_stale(path)
    before = sha(path)
    with held_by_another_process(path) as pid:
        res = repair()
        assert res.exit_code == 1
        assert f"held by process {pid} (" in res.output
        check = repair("--check-only")  # diagnosing is read-only, so it still runs
        assert check.exit_code == 3
    assert sha(path) == before and not (hermes_home / "backups").exists()


def test_the_ledger_stops_a_third_failing_attempt(hermes_home: Path) -> None:
    """The private copy is damaged in its canonical pages right after it is
    taken (the after_copy seam), so every attempt fails on the copy. (Index
    b-tree damage used to fail here too; repair now rebuilds it.)"""
    path = fill_home(hermes_home)
    mark_stale(path)
    before = sha(path)

    def damage_the_copy() -> None:
        (copy,) = hermes_home.glob(".hermes-scratch-*/state.db")
        junk_pages(copy, "messages")

    errors = []
    for _ in range(3):
        try:
            recovery_repair(hermes_home, after_copy=damage_the_copy)
        except (RepairFailed, RepairRefused) as e:
            errors.append(e)
    first, second, third = (str(e) for e in errors)
    assert "attempt 1 of 2" in first and "attempt 2 of 2" in second
    assert isinstance(errors[2], RepairRefused)
    assert "will not try again" in third and "--output" in third
    assert "attempt" not in third  # no third attempt was made
    assert sha(path) == before
    ledger = Ledger(hermes_home / "backups" / "repair-ledger.json")
    assert ledger.failures(file_fingerprint(path)) == 2
    assert stat.S_IMODE(os.stat(ledger.path).st_mode) == 0o600
    assert not list(hermes_home.glob(".hermes-scratch-*"))


def test_index_btree_damage_is_repaired_from_the_canonical_tables(hermes_home: Path) -> None:
    """Junk over whole b-tree pages of the index: reindex cannot free them,
    so repair rebuilds the store from its canonical rows (every row checked),
    promotes it under the exclusive lock and keeps the damaged file."""
    path = fill_home(hermes_home)
    with SessionDB.open(hermes_home) as db:
        rows = [(m["_db_persisted"].id, m["content"]) for m in db.get_messages("shared")]
    expected = results(hermes_home)
    junk_pages(path, "messages_fts_data")
    res = CliRunner().invoke(cli, ["sessions", "reindex"])
    assert res.exit_code == 1 and res.output.splitlines()[-1].endswith("sessions repair")
    res = repair("--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["status"] == "repaired"
    (kept,) = list_backups(hermes_home / "backups")
    conn = open_readonly(kept)  # the damaged file, kept: its index pages still junk
    try:
        with pytest.raises(apsw.CorruptError):
            conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()
    with SessionDB.open(hermes_home) as db:
        assert [(m["_db_persisted"].id, m["content"])
                for m in db.get_messages("shared")] == rows
        assert db.search_index_stale() is None
    assert results(hermes_home) == expected
    conn = open_readonly(path)
    try:
        assert [r[0] for r in conn.execute("PRAGMA integrity_check")] == ["ok"]
    finally:
        conn.close()


def test_a_store_changed_during_repair_is_not_overwritten(hermes_home: Path) -> None:
    """A message written after the scratch copy was taken must survive: the
    promotion re-checks the canonical rows under the exclusive lock."""
    path = fill_home(hermes_home)
    mark_stale(path)

    def write_meanwhile() -> None:
        with SessionDB(path) as db:
            db.append_message("shared", {"role": "user", "content": "written mid-repair"})

    with pytest.raises(RepairFailed, match="changed while it was being repaired"):
        recovery_repair(hermes_home, after_copy=write_meanwhile)
    with SessionDB.open(hermes_home) as db:
        assert db.get_messages("shared")[-1]["content"] == "written mid-repair"
    assert json.loads(repair("--json").output)["status"] in ("healthy", "repaired")
