"""`hermes doctor`: each check on a store built to trigger it, and `--fix`."""
from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.doctor import checks as doctor
from hstate_recovery.source import liveread
from sessiondb import SessionDB
from sessiondb.base.errors import DiskFull
from sessiondb.importers.spool_import import spool_failed_write
from tests.helpers.damage import copy_open_bundle
from tests.helpers.search_damage import junk_fts_blocks, junk_pages
from tests.helpers.stores import (fill_home, held_by_another_process, make_old_schema,
                                  mark_stale, results, sha)


def run_doctor(*args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(cli, ["doctor", "--json", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    # stdout only: library warnings go to stderr as "Warning: ..." lines
    return res.exit_code, json.loads(res.stdout) if res.stdout.startswith("{") else {}


def by_id(doc: dict, check: str) -> list[dict]:
    return [f for f in doc["findings"] if f["id"] == check]


def only(doc: dict, check: str) -> dict:
    found = by_id(doc, check)
    assert len(found) == 1, found
    return found[0]


def test_healthy_store_is_all_ok_and_changes_nothing(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    before = sha(path)
    code, doc = run_doctor()
    assert code == 0 and doc["healthy"] and doc["worst"] == "info"
    assert {f["severity"] for f in doc["findings"]} <= {"ok", "info"}
    assert {f["id"] for f in doc["findings"]} >= {
        "permissions", "free_disk", "sqlite_version", "journal_mode", "wal_size", "sidecars",
        "identity", "holders", "schema", "quick_check", "search_index", "fts_stale", "spool",
        "temp_files", "quarantine", "backups"}
    assert [f["id"] for f in doc["findings"] if f["severity"] != "ok"] == ["backups"]
    assert sha(path) == before  # a read-only open may leave an empty -wal, never frames
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    assert not list(hermes_home.glob(".hermes-scratch-*"))  # the FTS copy is cleaned up


def test_human_output_is_a_table_with_a_summary(hermes_home: Path) -> None:
    fill_home(hermes_home)
    res = CliRunner().invoke(cli, ["doctor"])
    assert res.exit_code == 0
    assert res.output.splitlines()[0].split() == ["severity", "check", "finding", "fix"]
    assert res.output.rstrip().splitlines()[-1] == \
        "22 checks: 21 ok, 1 info, 0 warn, 0 error; worst: info"


def test_permissions_warn_and_fix_tightens(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    os.chmod(path, 0o644)
    os.chmod(hermes_home, 0o755)
    code, doc = run_doctor()
    assert code == 3
    found = by_id(doc, "permissions")
    assert {f["fix"] for f in found} == {f"chmod 600 {path}", f"chmod 700 {hermes_home}"}
    assert all(f["fix_available"] for f in found)
    code, doc = run_doctor("--fix")
    assert code == 0 and f"chmod 600 {path}" in doc["applied"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(hermes_home.stat().st_mode) == 0o700
    assert only(doc, "permissions")["severity"] == "ok"


def test_free_disk_below_the_floor_is_an_error(hermes_home: Path, monkeypatch) -> None:
    fill_home(hermes_home)
    monkeypatch.setattr(doctor, "DISK_ERROR_BYTES", 1 << 62)
    code, doc = run_doctor()
    assert code == 4
    finding = only(doc, "free_disk")
    assert finding["severity"] == "error" and "free space" in finding["fix"]


def test_no_room_for_the_private_copy_leaves_search_unchecked(hermes_home: Path,
                                                             monkeypatch) -> None:
    from hstate_recovery.source import snapshot
    fill_home(hermes_home)
    monkeypatch.setattr(snapshot, "DEFAULT_HEADROOM", 1 << 62)
    code, doc = run_doctor()
    finding = only(doc, "search_index")
    assert finding["severity"] == "info" and "not enough free space" in finding["message"]
    assert not finding["fix_available"]  # --fix must not rebuild an index it never checked
    assert not list(hermes_home.glob(".hermes-scratch-*"))


def test_sqlite_in_the_wal_reset_band_is_an_error(hermes_home: Path, monkeypatch) -> None:
    fill_home(hermes_home)
    # doctor binds the name from sessiondb.recovery_api: patch what doctor calls
    monkeypatch.setattr(doctor, "sqlite_library_version", lambda: "3.45.1")
    code, doc = run_doctor()
    assert code == 4 and only(doc, "sqlite_version")["severity"] == "error"
    assert "3.45.1" in only(doc, "sqlite_version")["message"]


def test_journal_mode_delete_is_reported(hermes_home: Path) -> None:
    hermes_home.mkdir(mode=0o700)
    with SessionDB(hermes_home / "state.db", journal_mode="delete") as db:
        db.create_session("a", source="test")
    code, doc = run_doctor()
    finding = only(doc, "journal_mode")
    assert finding["severity"] == "info" and "delete" in finding["message"]


def test_wal_size_and_sidecar_mismatch(hermes_home: Path, open_store, monkeypatch) -> None:
    fill_home(hermes_home)
    db = open_store()  # this process keeps the -wal alive (it is not "another process")
    db.append_message("shared", {"role": "user", "content": "kept in the wal"})
    monkeypatch.setattr(doctor, "WAL_WARN_BYTES", 0)
    code, doc = run_doctor()
    assert code == 3 and only(doc, "wal_size")["severity"] == "warn"
    assert only(doc, "wal_size")["fix_available"]
    db.close()
    path = hermes_home / "state.db"
    Path(f"{path}-shm").write_bytes(b"")
    code, doc = run_doctor()
    assert only(doc, "sidecars")["severity"] == "info"


def test_wal_without_shm_warns_never_to_delete_it(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    Path(f"{path}-wal").write_bytes(b"")
    os.chmod(f"{path}-wal", 0o600)
    code, doc = run_doctor()
    finding = by_id(doc, "sidecars")[0]
    assert finding["severity"] == "warn" and "never delete it" in finding["message"]


def test_holders_are_named(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    with held_by_another_process(path) as pid:
        code, doc = run_doctor()
    finding = only(doc, "holders")
    assert finding["severity"] == "info" and f"{pid} (" in finding["message"]
    assert "lockholder" in finding["message"]


def test_pending_migrations(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    make_old_schema(path)
    before = sha(path)
    code, doc = run_doctor()
    assert code == 3
    finding = only(doc, "schema")
    assert "m004_search_index" in finding["message"]
    assert finding["fix"].endswith("sessions repair")
    assert sha(path) == before  # the check did not migrate


def test_structural_damage_is_an_error_with_recover_commands(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    junk_pages(path, "messages")
    before = sha(path)
    code, doc = run_doctor("--full")
    assert code == 4
    finding = only(doc, "integrity_check")
    assert finding["severity"] == "error"
    assert "--inspect-only" in finding["fix"] and "--output" in finding["fix"]
    code, doc = run_doctor("--fix")  # nothing store-writing is attempted on structural damage
    assert code == 1 and doc["applied"] == [] and "structural damage" in doc["refused"]
    assert sha(path) == before


def test_quick_check_is_bounded(hermes_home: Path, monkeypatch) -> None:
    fill_home(hermes_home)
    monkeypatch.setattr(liveread, "QUICK_CHECK_BUDGET_S", 0.0)
    code, doc = run_doctor()
    finding = only(doc, "quick_check")
    assert finding["severity"] == "info" and "stopped after 0 s" in finding["message"]
    assert "--inspect-only" in finding["fix"]
    assert only(doc, "search_index")["severity"] == "ok"  # the other checks still ran


def test_search_index_damage_and_fix_restores_results(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    expected = results(hermes_home)
    assert junk_fts_blocks(path) > 0
    code, doc = run_doctor()
    assert code == 3
    finding = only(doc, "search_index")
    assert finding["fix_available"] and "sessions repair" in finding["fix"]
    code, doc = run_doctor("--fix")
    assert code == 0, doc
    assert any(a.startswith("rebuilt the search index") for a in doc["applied"])
    assert only(doc, "search_index")["severity"] == "ok"
    assert results(hermes_home) == expected


def test_fts_stale_and_fix(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    mark_stale(path)
    code, doc = run_doctor()
    assert code == 3
    finding = only(doc, "fts_stale")
    assert finding["severity"] == "warn" and "a failed write" in finding["message"]
    code, doc = run_doctor("--fix")
    assert code == 0 and only(doc, "fts_stale")["severity"] == "ok"


def test_pending_spool_and_fix_imports_it(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    batch = [{"role": "user", "content": "spooled while the disk was full"}]
    with SessionDB.open(hermes_home) as db:  # spooled exactly as a failed append does
        err = DiskFull("test", path=str(path))
        assert spool_failed_write(db.core, "shared", batch, err) is not None
    code, doc = run_doctor()
    finding = only(doc, "spool")
    assert code == 3 and finding["fix"].endswith("sessions import-spool")
    code, doc = run_doctor("--fix")
    assert code == 0 and only(doc, "spool")["severity"] == "ok"
    with SessionDB.open(hermes_home) as db:
        assert db.get_messages("shared")[-1]["content"] == "spooled while the disk was full"


def test_stale_scratch_files_are_removed_fresh_ones_kept(hermes_home: Path) -> None:
    fill_home(hermes_home)
    old = hermes_home / ".hermes-scratch-abc123"
    old.mkdir(mode=0o700)
    (old / "state.db").write_bytes(b"x")
    fresh = hermes_home / ".hermes-scratch-inuse"
    fresh.mkdir(mode=0o700)
    hour_ago = time.time() - 2 * doctor.STALE_SCRATCH_S
    os.utime(old, (hour_ago, hour_ago))
    code, doc = run_doctor()
    assert code == 3 and ".hermes-scratch-abc123" in only(doc, "temp_files")["message"]
    code, doc = run_doctor("--fix")
    assert code == 0 and not old.exists() and fresh.exists()


def test_quarantine_state(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    (hermes_home / "state.recovered.db").write_bytes(b"")
    code, doc = run_doctor()
    assert code == 0 and only(doc, "quarantine")["severity"] == "info"
    Path(f"{path}.rescued-20260101T000000-123.db").write_bytes(b"")
    code, doc = run_doctor()
    found = by_id(doc, "quarantine")
    assert code == 3 and {f["severity"] for f in found} == {"warn", "info"}


def test_backups_present_after_repair(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    mark_stale(path)
    assert CliRunner().invoke(cli, ["sessions", "repair"]).exit_code == 0
    code, doc = run_doctor()
    assert code == 0 and only(doc, "backups")["severity"] == "ok"


def test_fix_refuses_while_another_process_holds_the_store(hermes_home: Path) -> None:
    path = fill_home(hermes_home)
    mark_stale(path)
    os.chmod(path, 0o644)
    before = sha(path)
    with held_by_another_process(path) as pid:
        res = CliRunner().invoke(cli, ["doctor", "--fix"])
        assert res.exit_code == 1
        assert f"held by {pid} (" in res.output and "changes nothing" in res.output
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sha(path) == before  # neither the marker nor anything else was touched
    code, doc = run_doctor("--fix")
    assert code == 0 and only(doc, "fts_stale")["severity"] == "ok"


def test_fix_checkpoints_a_quiet_wal_and_keeps_its_messages(hermes_home: Path, tmp_path: Path,
                                                            monkeypatch) -> None:
    """A -wal left by a crash (copied while a store was open): doctor --fix
    checkpoints it through the store, and every message in it survives."""
    fill_home(hermes_home)
    with SessionDB.open(hermes_home) as db:
        db.append_message("shared", {"role": "user", "content": "only in the wal"})
        copy_open_bundle(db, tmp_path / "crashed", with_shm=False)
    home = tmp_path / "crashed"
    monkeypatch.setenv("HERMES_HOME", str(home))
    assert Path(home / "state.db-wal").stat().st_size > 0
    monkeypatch.setattr(doctor, "WAL_WARN_BYTES", 0)
    code, doc = run_doctor()
    assert code == 3 and only(doc, "wal_size")["severity"] == "warn"
    code, doc = run_doctor("--fix")
    assert any(a.startswith("PASSIVE checkpoint") for a in doc["applied"])
    assert only(doc, "wal_size")["severity"] == "ok"
    with SessionDB.open(home) as db:
        assert db.get_messages("shared")[-1]["content"] == "only in the wal"
        assert len(db.get_messages("shared")) == 121


@pytest.mark.parametrize("profile", ["p1"])
def test_profile_commands_name_the_profile(hermes_home: Path, profile: str) -> None:
    with SessionDB.open(hermes_home, profile) as db:
        db.create_session("a", source="test")
    mark_stale(hermes_home / "profiles" / profile / "state.db")
    res = CliRunner().invoke(cli, ["--profile", profile, "doctor", "--json"])
    finding = only(json.loads(res.output), "fts_stale")
    assert f"--profile {profile} sessions repair" in finding["fix"]
