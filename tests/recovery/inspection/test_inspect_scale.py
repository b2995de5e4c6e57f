"""`recover --inspect-only` bounded on big files: one quick_check of the whole
file on a healthy copy, FTS5 checked by samples past FULL_CHECK_BYTES, the
carving estimate only for a damaged copy, phases told to a terminal; the
source never changes."""
from __future__ import annotations

import json
from pathlib import Path

import apsw
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.inspection.examine import inspect
from sessiondb import SessionDB
from tests.helpers.damage import bundle_hashes


def build(path: Path, *, messages: int = 300, index: bool = True) -> Path:
    with SessionDB(path, background_index=index) as db:
        db.create_session("s1", source="t")
        db.append_messages("s1", [{"role": "user", "content": f"word{i} alpha beta{i % 7}"}
                                  for i in range(messages)])
        if index:
            db.catch_up_index()
        else:
            db._indexer.pause()  # leave the tail unindexed (close would index it)
    return path


def test_sampled_fts_check_passes_a_healthy_store_and_changes_nothing(tmp_path):
    db = build(tmp_path / "state.db")
    before = bundle_hashes(db)
    r = inspect(db, fts_full=False)
    assert bundle_hashes(db) == before
    assert r.verdict == "healthy"
    assert {f.method for f in r.fts} == {"sampled"}
    assert all(f.integrity_ok and f.probe_ok and f.probes > 0 for f in r.fts)
    assert r.carve_estimate is None  # healthy: the rows read are exact
    assert r.quick_check["ok"] is True and r.quick_check["damaged"] == {}


def test_small_files_keep_the_exhaustive_fts_check(tmp_path):
    r = inspect(build(tmp_path / "state.db"))
    assert {f.method for f in r.fts} == {"integrity-check"}
    assert r.verdict == "healthy"


def test_sampled_fts_check_finds_an_index_that_lost_its_rows(tmp_path):
    db = build(tmp_path / "state.db")
    conn = apsw.Connection(str(db))
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('delete-all')")
    conn.close()
    r = inspect(db, fts_full=False)
    assert r.verdict == "fts_only"
    (words,) = [f for f in r.fts if f.name == "messages_fts"]
    assert not words.probe_ok and "missed indexed row" in words.error
    # (the term table keeps its own terms: its sampled rows are still found)
    assert all(f.probe_ok for f in r.fts if f.name != "messages_fts")
    assert r.carve_estimate is not None  # damaged: what carving would find is asked


def test_rows_the_index_has_not_caught_up_on_are_not_probed(tmp_path):
    db = tmp_path / "state.db"
    with SessionDB(db, background_index=False) as store:
        store.create_session("s1", source="t")
        store.append_messages("s1", [{"role": "user", "content": f"old{i} text"}
                                     for i in range(50)])
        store.catch_up_index()
        store.append_messages("s1", [{"role": "user", "content": f"new{i} text"}
                                     for i in range(200)])
        store._indexer.pause()
        assert store.index_backlog().tail == 200
        r = inspect(db, fts_full=False)
    assert r.data_verdict == "healthy" and all(f.probe_ok for f in r.fts)  # (held: by us)


def test_damage_is_still_placed_table_by_table(tmp_path):
    db = build(tmp_path / "state.db", messages=2000)
    conn = apsw.Connection(str(db))
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name ="
                           " 'messages_in_order'").fetchone()
    (ps,) = conn.execute("PRAGMA page_size").fetchone()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with open(db, "r+b") as f:  # garble the index's root page (a derived b-tree)
        f.seek((root - 1) * ps + 8)
        f.write(b"\xff" * 64)
    r = inspect(db)
    assert r.quick_check["ok"] is False and "messages" in str(r.quick_check["damaged"])


def test_phases_are_told_and_json_is_unchanged(tmp_path):
    db = build(tmp_path / "state.db")
    phases: list[str] = []
    inspect(db, progress=phases.append)
    assert phases[0].startswith("copying") and any("quick_check" in p for p in phases)
    res = CliRunner().invoke(cli, ["sessions", "recover", "--source", str(db),
                                   "--inspect-only", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["verdict"] == "healthy"  # stdout is the JSON alone
    assert "inspect:" not in res.output  # not a terminal: no phase lines


def test_full_flag_runs_the_integrity_check_past_the_threshold(tmp_path, monkeypatch):
    import importlib
    inspect_mod = importlib.import_module("hstate_recovery.inspection.examine")  # (the package exports a function of that name)
    monkeypatch.setattr(inspect_mod, "FULL_CHECK_BYTES", 0)  # every file counts as big
    db = build(tmp_path / "state.db")
    sampled = CliRunner().invoke(cli, ["sessions", "recover", "--source", str(db),
                                       "--inspect-only", "--json"])
    full = CliRunner().invoke(cli, ["sessions", "recover", "--source", str(db),
                                    "--inspect-only", "--full", "--json"])
    assert {f["method"] for f in json.loads(sampled.output)["fts"]} == {"sampled"}
    assert {f["method"] for f in json.loads(full.output)["fts"]} == {"integrity-check"}
    misuse = CliRunner().invoke(cli, ["sessions", "recover", "--source", str(db), "--output",
                                      str(tmp_path / "new.db"), "--full"])
    assert misuse.exit_code == 2 and "--full only applies with --inspect-only" in misuse.output
    assert not (tmp_path / "new.db").exists()
