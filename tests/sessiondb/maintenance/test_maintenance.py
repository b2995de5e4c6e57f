"""Pin, archive and prune (sessiondb/maintenance/lifecycle.py) through the library and the CLI."""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from sessiondb.maintenance import lifecycle as maintenance
from sessiondb.base.errors import InvalidInput
from sessiondb.maintenance.lifecycle import MaintenanceRefused, PruneFilter
from tests.helpers.stores import held_by_another_process

DAY = 86400.0


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def build(home: Path) -> Path:
    """old (ended, 30 d ago) with child old_child; recent; empty (no messages, 30 d ago);
    big (30 d ago, large messages); pinned_old (30 d ago, pinned)."""
    now = time.time()
    specs = [("old", 30, None, 20, 100), ("old_child", 30, "old", 5, 100),
             ("recent", 0, None, 20, 100), ("empty", 30, None, 0, 0),
             ("big", 30, None, 20, 20000), ("pinned_old", 30, None, 5, 100)]
    for sid, age, parent, n, size in specs:
        with SessionDB.open(home, clock=lambda age=age: now - age * DAY) as db:
            db.create_session(sid, source="agent" if sid != "recent" else "cli",
                              parent_session_id=parent)
            if n:
                db.append_messages(sid, [{"role": "user", "content": f"{sid} word{i} " +
                                          "x" * size} for i in range(n)])
            if sid in ("old", "old_child"):
                db.end_session(sid)
    with SessionDB.open(home) as db:
        maintenance.pin(db.core, ["pinned_old"])
    return home / "state.db"


def ids_of(plan) -> set[str]:
    return {s.id for s in plan.sessions}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_filters_pins_and_lineage(hermes_home):
    build(hermes_home)
    with SessionDB.open(hermes_home) as db:
        old = PruneFilter(older_than_s=7 * DAY)
        plan = maintenance.plan_prune(db.core, old)
        # old keeps its child: the child matches too, so both go
        assert ids_of(plan) == {"old", "old_child", "empty", "big"}
        assert plan.kept == {"pinned_old": "pinned"}
        assert ids_of(maintenance.plan_prune(db.core, PruneFilter(never_active=True))) == {"empty"}
        assert ids_of(maintenance.plan_prune(db.core, PruneFilter(source="cli"))) == {"recent"}
        assert ids_of(maintenance.plan_prune(db.core, PruneFilter(larger_than=200_000))) == {"big"}
        # "old" alone would orphan its child: kept, with the reason and the flag to pass
        ended_parent = maintenance.plan_prune(db.core, PruneFilter(ended=True, larger_than=3000))
        assert "old" not in ids_of(ended_parent)
        assert "--with-children" in ended_parent.kept["old"]
        with_kids = maintenance.plan_prune(db.core, PruneFilter(ended=True, larger_than=3000,
                                                           with_children=True))
        assert ids_of(with_kids) == {"old", "old_child"}
        # children are deleted first
        assert [s.id for s in with_kids.sessions].index("old_child") == 0
        with pytest.raises(InvalidInput):
            maintenance.plan_prune(db.core, PruneFilter())


def test_a_pinned_child_keeps_its_parent(hermes_home):
    build(hermes_home)
    with SessionDB.open(hermes_home) as db:
        maintenance.pin(db.core, ["old_child"])
        plan = maintenance.plan_prune(db.core, PruneFilter(ended=True, with_children=True))
        assert ids_of(plan) == set()
        assert plan.kept["old_child"] == "pinned" and "old" in plan.kept


def test_prune_deletes_exports_first_and_estimates_bytes(hermes_home, tmp_path):
    build(hermes_home)
    out = tmp_path / "pruned.jsonl"
    res = run("sessions", "prune", "--older-than", "7d", "--export-to", str(out), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["deleted_sessions"] == 4 and doc["deleted_messages"] == 45
    assert doc["bytes_estimate"] > 20 * 20000  # the big session alone holds 400 KB of text
    assert doc["freelist_bytes_after"] > 0
    with SessionDB.open(hermes_home) as db:
        assert sorted(s.id for s in db.list_sessions(archived=None)) == ["pinned_old", "recent"]
    lines = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert {r["session"]["id"] for r in lines if r["type"] == "session"} == \
        {"old", "old_child", "empty", "big"}
    # and the export brings them back
    assert run("sessions", "import", str(out)).exit_code == 0
    with SessionDB.open(hermes_home) as db:
        assert len(db.get_messages("big")) == 20


def test_dry_run_changes_nothing(hermes_home):
    db_path = build(hermes_home)
    before = sha(db_path)
    res = run("sessions", "prune", "--older-than", "7d", "--dry-run")
    assert res.exit_code == 0, res.output
    assert "Would prune 4 session(s), 45 message(s)" in res.stdout
    assert "Dry run: nothing was changed." in res.stdout
    assert sha(db_path) == before


def test_prune_refused_under_a_holder_flags_are_not(hermes_home):
    db_path = build(hermes_home)
    with held_by_another_process(db_path) as pid:
        res = run("sessions", "prune", "--older-than", "7d")
        assert res.exit_code == 1
        assert f"held by process {pid}; prune is not safe online" in res.output
        # flags are one small transaction: fine online (the holder's lock is released
        # by the helper on stdin; here it holds BEGIN IMMEDIATE, so the flag write waits)
    with SessionDB.open(hermes_home) as db:
        assert len(db.list_sessions(archived=None)) == 6
        with pytest.raises(MaintenanceRefused) as e:
            with held_by_another_process(db_path) as pid:
                maintenance.prune(db.core, PruneFilter(older_than_s=7 * DAY))
        assert e.value.holders == [pid] and e.value.operation == "prune"


def test_archive_hides_from_list_and_search(hermes_home):
    build(hermes_home)
    assert run("sessions", "archive", "old", "recent").exit_code == 0
    listed = json.loads(run("sessions", "list", "--json").stdout)["sessions"]
    assert {s["id"] for s in listed} == {"old_child", "empty", "big", "pinned_old"}
    only = json.loads(run("sessions", "list", "--archived", "--json").stdout)["sessions"]
    assert {s["id"] for s in only} == {"old", "recent"}
    assert json.loads(run("sessions", "list", "--all", "--json").stdout)["count"] == 6

    def found(*extra: str) -> set[str]:
        res = run("sessions", "search", "word3", "--json", *extra)
        return {h["session_id"] for h in json.loads(res.stdout)["hits"]}
    assert found() == {"old_child", "big", "pinned_old"}
    assert found("--archived-sessions") == {"old", "old_child", "recent", "big", "pinned_old"}
    assert run("sessions", "unarchive", "old").exit_code == 0
    assert "old" in found()
    with SessionDB.open(hermes_home) as db:
        assert maintenance.flags_of(db.core, "recent").archived_at is not None
        assert maintenance.flags_of(db.core, "old") == maintenance.Flags(False, None)


def test_pin_unpin_and_unknown_session(hermes_home):
    build(hermes_home)
    assert run("sessions", "unpin", "pinned_old").exit_code == 0
    res = run("sessions", "prune", "--older-than", "7d", "--dry-run", "--json")
    assert "pinned_old" in {s["id"] for s in json.loads(res.stdout)["sessions"]}
    res = run("sessions", "pin", "nope")
    assert res.exit_code == 1 and res.output.strip() == "Error: no session 'nope'"
    res = run("sessions", "prune", "--older-than", "soon")
    assert res.exit_code == 2 and "not an age" in res.output
    res = run("sessions", "prune")
    assert res.exit_code == 2 and "name at least one filter" in res.output


def test_deleted_session_takes_its_flags(hermes_home):
    build(hermes_home)
    with SessionDB.open(hermes_home) as db:
        maintenance.archive(db.core, ["big"])
        db.delete_session("big")
        with db._read() as conn:
            assert conn.execute("SELECT count(*) FROM session_flags WHERE session_id = 'big'"
                                ).fetchone()[0] == 0


def test_optimize_is_refused_under_a_holder_and_changes_nothing(hermes_home):
    db_path = build(hermes_home)
    before = sha(db_path)
    with held_by_another_process(db_path) as pid:
        res = run("sessions", "optimize")
        assert res.exit_code == 1
        assert f"held by process {pid}; optimize is not safe online" in res.output
    assert sha(db_path) == before
    assert not list(hermes_home.glob(".hermes-scratch-*"))


def test_optimize_gives_back_what_prune_freed(hermes_home):
    db_path = build(hermes_home)
    assert run("sessions", "prune", "--larger-than", "200K").exit_code == 0
    res = run("sessions", "optimize", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["bytes_freed"] == doc["bytes_before"] - doc["bytes_after"] > 20 * 20000 * 0.9
    assert doc["bytes_after"] == db_path.stat().st_size  # the WAL was folded back
    assert set(doc["steps"]) == {"copy", "merge_search", "vacuum_into", "verify", "promote",
                                 "checkpoint"}
    with SessionDB.open(hermes_home) as db:
        assert db.quick_check() == ["ok"]
        assert {h.session_id for h in db.search("word3", limit=50)} == \
            {"old", "old_child", "recent", "pinned_old"}


def test_features_on_the_core_read_the_store_clock(tmp_path: Path) -> None:
    """The clock lives in the core: a flag set through `db.core` and a session
    row written through `SessionDB` get their times from the same clock."""
    with SessionDB(tmp_path / "c.db", clock=lambda: 1_000.0) as db:
        sid = db.create_session(source="cli")
        maintenance.archive(db.core, [sid])
        assert maintenance.flags_of(db.core, sid).archived_at == 1_000.0
        db.clock = lambda: 2_000.0
        db.end_session(sid)
        assert db.core.now() == db.now() == db.get_session(sid).ended_at == 2_000.0
        db.clock = lambda: float("nan")
        with pytest.raises(InvalidInput):
            maintenance.archive(db.core, [sid])
        assert maintenance.flags_of(db.core, sid).archived_at == 1_000.0  # unchanged
