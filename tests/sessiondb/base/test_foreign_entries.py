"""Directories of ours hold only what we wrote: a symlink, FIFO or other
non-regular entry with one of our names (spool files, backups, scratch,
rescued copies) is never read, written through, listed as ours, moved or
removed, and its target is untouched."""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import apsw
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.repairs.backups import list_backups, make_backup
from sessiondb import SessionDB, StoreCorrupt
from sessiondb.base.paths import own_entries
from sessiondb.importers.spool_import import import_spool, spool_dir_for, spool_failed_write

SECRET_LINE = '{"kind": "message", "session_id": "s1", "uid": "x", "message": "outside"}\n'


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def plant(tmp_path: Path, spool: Path, name: str) -> Path:
    """A file outside the home, and a symlink to it in the spool directory."""
    outside = tmp_path / "outside.jsonl"
    outside.write_text(SECRET_LINE)
    spool.mkdir(mode=0o700, parents=True, exist_ok=True)
    (spool / name).symlink_to(outside)
    return outside


def test_own_entries_lists_regular_files_only(tmp_path: Path):
    (tmp_path / "a.jsonl").write_text("x")
    (tmp_path / "b.jsonl").symlink_to(tmp_path / "a.jsonl")
    os.mkfifo(tmp_path / "c.jsonl")
    (tmp_path / "d.jsonl").mkdir()
    (tmp_path / "e.jsonl").symlink_to(tmp_path / "missing")
    assert [p.name for p in own_entries(tmp_path, "*.jsonl")] == ["a.jsonl"]
    assert [p.name for p in own_entries(tmp_path, "*.jsonl", dirs=True)] == ["a.jsonl",
                                                                              "d.jsonl"]
    assert own_entries(tmp_path / "absent", "*") == []


def test_import_spool_skips_a_symlink(db: SessionDB, sid: str, tmp_path: Path):
    outside = plant(tmp_path, spool_dir_for(db.path), "s1.jsonl")
    before = digest(outside)
    report = import_spool(db)
    assert report.files == []  # not read, not reported as unreadable, not moved
    assert digest(outside) == before
    assert (spool_dir_for(db.path) / "s1.jsonl").is_symlink()
    res = run("sessions", "import-spool", "--json")
    assert res.exit_code == 0, res.output
    assert "outside" not in res.output
    assert db.get_messages(sid) == []


def test_a_failed_write_never_appends_through_a_symlink(db: SessionDB, sid: str,
                                                       tmp_path: Path):
    outside = plant(tmp_path, spool_dir_for(db.path), f"{sid}.jsonl")
    before = digest(outside)
    err = StoreCorrupt("test", path=str(db.path))
    assert spool_failed_write(db.core, sid, [{"role": "user", "content": "m"}], err) is None
    assert digest(outside) == before
    assert getattr(err, "spooled_to", None) is None


def test_a_fifo_in_the_spool_is_not_written_and_does_not_block(db: SessionDB, sid: str):
    spool = spool_dir_for(db.path)
    spool.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.mkfifo(spool / f"{sid}.jsonl")
    err = StoreCorrupt("test", path=str(db.path))
    assert spool_failed_write(db.core, sid, [{"role": "user", "content": "m"}], err) is None
    assert stat.S_ISFIFO(os.lstat(spool / f"{sid}.jsonl").st_mode)
    assert import_spool(db).files == []


def test_doctor_does_not_count_or_remove_foreign_entries(hermes_home: Path, tmp_path: Path):
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
    outside = plant(tmp_path, hermes_home / "spool", "s1.jsonl")
    old = 10_000  # seconds: older than the stale-scratch age
    scratch_target = tmp_path / "keepme"
    scratch_target.mkdir()
    (scratch_target / "f").write_text("keep")
    link = hermes_home / ".s1.recovering-1"
    link.symlink_to(scratch_target)
    os.utime(link, (os.path.getmtime(link) - old,) * 2, follow_symlinks=False)
    (hermes_home / "state.db.rescued-x").symlink_to(outside)
    res = run("doctor", "--json")
    doc = json.loads(res.stdout)
    by_check = {f["check"]: f for f in doc["findings"]}
    assert by_check["spool"]["severity"] == "ok"
    assert by_check["temp_files"]["severity"] == "ok"
    assert by_check["quarantine"]["severity"] == "ok"
    run("doctor", "--fix")
    assert (scratch_target / "f").read_text() == "keep" and link.is_symlink()
    assert outside.read_text() == SECRET_LINE


def test_backups_ignore_and_keep_symlinks(tmp_path: Path, hermes_home: Path):
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        path = db.path
    backups = tmp_path / "backups"
    backups.mkdir()
    victim = tmp_path / "victim.db"
    victim.write_bytes(b"not a backup")
    (backups / "state-20000101T000000-000000000-0000000000000000.db").symlink_to(victim)
    assert list_backups(backups) == []
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        made = make_backup(conn, path, backups, keep=1)
    finally:
        conn.close()
    assert not made.reused and made.pruned == []
    assert [p.name for p in backups.iterdir() if p.is_symlink()] == [
        "state-20000101T000000-000000000-0000000000000000.db"]
    assert victim.read_bytes() == b"not a backup"


def test_symlinked_memory_and_skill_files_are_never_read(tmp_path: Path):
    from hstate_agent.errors import AgentError
    from hstate_agent.memory.homefiles import read_text
    from hstate_agent.memory.skills import SkillStore
    secret = tmp_path / "id_rsa"
    secret.write_text("---\ndescription: PRIVATE KEY\n---\nPRIVATE KEY\n")
    home = tmp_path / "home"
    (home / "memories").mkdir(parents=True)
    (home / "memories" / "MEMORY.md").symlink_to(secret)
    try:
        read_text(home / "memories" / "MEMORY.md")
        raise AssertionError("a symlinked memory file was read")
    except AgentError as e:
        assert "symbolic link" in str(e)
    (home / "skills" / "real").mkdir(parents=True)
    (home / "skills" / "real" / "SKILL.md").write_text("---\ndescription: ok\n---\nbody\n")
    (home / "skills" / "linkdir").symlink_to(secret.parent)
    (home / "skills" / "linked").mkdir()
    (home / "skills" / "linked" / "SKILL.md").symlink_to(secret)
    names = [s.name for s in SkillStore(home).list()]
    assert names == ["real"]
    assert secret.read_text().startswith("---")  # untouched


def test_a_symlinked_skill_directory_is_neither_read_nor_written(tmp_path: Path):
    """O_NOFOLLOW guards only the last component: a skill directory that is
    a link must be refused by name too, or a write would land outside."""
    import pytest

    from hstate_agent.errors import SkillError
    from hstate_agent.memory.memory import Provenance
    from hstate_agent.memory.skills import SkillStore
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text("---\nname: linkdir\ndescription: not ours\n---\nx\n")
    home = tmp_path / "home"
    (home / "skills").mkdir(parents=True)
    (home / "skills" / "linkdir").symlink_to(outside)
    store = SkillStore(home)
    before = sorted(p.name for p in outside.iterdir())
    with pytest.raises(SkillError, match="neither read nor written"):
        store.view("linkdir")
    with pytest.raises(SkillError, match="neither read nor written"):
        store.patch("linkdir", "x", "y", Provenance("assistant_tool"))
    with pytest.raises(SkillError, match="neither read nor written"):
        store.create("linkdir", "---\nname: linkdir\ndescription: d\n---\nbody\n",
                     Provenance("assistant_tool"))
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (outside / "SKILL.md").read_text().endswith("x\n")
