"""`hermes backup restore FILE`: refusals (held store, older backup, a
backup that does not verify, an unreadable store) and --force; the replaced
files are kept and the restored store verified."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.repairs import create_backup
from sessiondb import SessionDB
from tests.helpers.stores import held_by_another_process, sha


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def store_with_backup(home: Path, messages: int = 3) -> tuple[Path, Path, str]:
    with SessionDB.open(home) as db:
        sid = db.create_session(source="t")
        for i in range(messages):
            db.append_message(sid, {"role": "user", "content": f"m{i}"})
    backup = Path(create_backup(home / "state.db", home / "backups").backup.path)
    return home / "state.db", backup, sid


def test_restore_puts_the_backup_in_place_and_keeps_the_replaced_files(hermes_home: Path) -> None:
    db, backup, sid = store_with_backup(hermes_home)
    with SessionDB.open(hermes_home) as store:
        store.delete_session(sid)  # a mistake after the backup, at the same newest time
    before = sha(backup)
    res = run("backup", "restore", "--force", str(backup), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    aside = Path(doc["aside_dir"])
    assert stat.S_IMODE(os.stat(aside).st_mode) == 0o700 and (aside / "state.db").exists()
    assert doc["verified_after"] and doc["counts_after"]["messages"] == 3 and doc["forced"]
    assert sha(backup) == before  # the backup itself is not consumed
    with SessionDB.open(hermes_home) as store:
        assert [m["content"] for m in store.get_messages(sid)] == ["m0", "m1", "m2"]
    assert not [p for p in hermes_home.iterdir() if ".restoring-" in p.name]


def test_restore_refuses_a_backup_older_than_the_store(hermes_home: Path) -> None:
    db, backup, sid = store_with_backup(hermes_home)
    with SessionDB.open(hermes_home) as store:
        store.append_message(sid, {"role": "user", "content": "after the backup"})
    before = sha(db)
    res = run("backup", "restore", str(backup))
    assert res.exit_code == 1
    assert "Error: the backup is older than the store" in res.output and "--force" in res.output
    assert sha(db) == before and not list(hermes_home.glob("replaced-*"))
    res = run("backup", "restore", "--force", str(backup))
    assert res.exit_code == 0, res.output
    assert "the replaced files are kept in" in res.output


def test_restore_refuses_while_another_process_holds_the_store(hermes_home: Path) -> None:
    db, backup, _ = store_with_backup(hermes_home)
    with held_by_another_process(db) as pid:
        res = run("backup", "restore", "--force", str(backup))
    assert res.exit_code == 1 and f"held by process {pid}" in res.output
    assert not list(hermes_home.glob("replaced-*"))
    assert not [p for p in hermes_home.iterdir() if ".restoring-" in p.name]


def test_restore_refuses_a_damaged_backup_and_an_unreadable_store(hermes_home: Path) -> None:
    db, backup, _ = store_with_backup(hermes_home)
    bad = hermes_home / "bad.db"
    bad.write_bytes(backup.read_bytes()[:4096] + os.urandom(backup.stat().st_size - 4096))
    res = run("backup", "restore", "--force", str(bad))
    assert res.exit_code == 1 and "does not verify" in res.output
    db.write_bytes(b"not a database" * 512)  # the store is gone: only --force restores
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    res = run("backup", "restore", str(backup))
    assert res.exit_code == 1 and "cannot be read" in res.output
    res = run("backup", "restore", "--force", str(backup))
    assert res.exit_code == 0, res.output
