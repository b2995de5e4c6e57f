"""File security: private modes on everything we create (even under a
permissive umask), outputs created exclusively (an existing file or a
symlink at the output path is refused), session ids confined to their
directories, and reports free of message text."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

import hstate_recovery
from hstate_cli.main import cli
from sessiondb import DiskFull, InvalidInput, SessionDB
from sessiondb.importers.spool_import import spool_dir_for, spool_file
from tests.helpers.faultvfs import FaultVFS

SECRET = "xyzzy-secret-message-text"


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    old = os.umask(0)  # the most permissive umask: our modes must not depend on it
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def assert_private(root: Path) -> list[Path]:
    """Every directory under ``root`` is 0700 and every file 0600."""
    seen = [root]
    assert mode(root) == 0o700, root
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            assert mode(Path(dirpath) / d) == 0o700, Path(dirpath) / d
            seen.append(Path(dirpath) / d)
        for f in files:
            assert mode(Path(dirpath) / f) == 0o600, Path(dirpath) / f
            seen.append(Path(dirpath) / f)
    return seen


def fill(db: SessionDB, sid: str = "s1", n: int = 20) -> None:
    db.create_session(sid, source="test", title="title")
    db.append_messages(sid, [{"role": "user", "content": f"{SECRET} {i}"} for i in range(n)])


def test_home_store_and_sidecars_are_private(hermes_home: Path):
    with SessionDB.open() as db:
        fill(db)
        names = {p.name for p in assert_private(hermes_home)}
        assert {"state.db", "state.db-wal", "state.db-shm"} <= names
    with SessionDB.open(profile="work") as db:
        fill(db)
    assert_private(hermes_home)
    assert mode(hermes_home / "profiles" / "work" / "state.db") == 0o600


def test_spool_directory_and_files_are_private(tmp_path: Path):
    shim = FaultVFS("sec_full")
    try:
        home = tmp_path / "home"
        home.mkdir(mode=0o700)
        with SessionDB(home / "state.db", vfs=shim.name) as db:
            fill(db, n=2)
            shim.faults.arm_full(1)
            with pytest.raises(DiskFull):
                db.append_message("s1", {"role": "user", "content": SECRET})
            shim.faults.clear()
        spooled = spool_file(spool_dir_for(home / "state.db"), "s1")
        assert spooled.exists()
        assert_private(home)
    finally:
        shim.unregister()


def test_recovery_work_dirs_output_and_report_are_private(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir(mode=0o700)
    with SessionDB(src / "state.db") as db:
        fill(db)
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    report = hstate_recovery.recover(src / "state.db", out / "new.db", report_path=out / "r.json",
                              work_dir=work, keep_work=True)
    assert report.outcome == "recovered"
    assert_private(out)
    kept = assert_private(work)
    assert any(p.name == "state.db" for p in kept)  # the snapshot copy was kept, private
    text = (out / "r.json").read_text()
    assert SECRET not in text and "title" not in json.loads(text)


@pytest.mark.parametrize("kind", ["file", "symlink", "dangling-symlink"])
def test_outputs_are_created_exclusively(tmp_path: Path, hermes_home: Path, kind: str):
    with SessionDB.open() as db:
        fill(db)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    targets = {name: tmp_path / name for name in ("export.jsonl", "new.db", "report.json")}
    for target in targets.values():
        if kind == "file":
            target.write_text("keep me")
        elif kind == "symlink":
            target.symlink_to(victim)
        else:
            target.symlink_to(tmp_path / "nowhere")
    store = str(hermes_home / "state.db")
    runs = [["sessions", "export", "--all", "-o", str(targets["export.jsonl"])],
            ["sessions", "recover", "--source", store, "--output", str(targets["new.db"])],
            ["sessions", "recover", "--source", store, "--output", str(tmp_path / "fresh.db"),
             "--report", str(targets["report.json"])]]
    for argv in runs:
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code in (1, 2), (argv, result.output)
        assert result.output.startswith("Error:") or "Error:" in result.output, result.output
    assert victim.read_text() == "keep me"
    assert not (tmp_path / "nowhere").exists()
    assert not (tmp_path / "fresh.db").exists()
    for target in targets.values():
        if kind == "file":
            assert target.read_text() == "keep me"
        else:
            assert target.is_symlink()


@pytest.mark.parametrize("sid", ["../escape", "a/b", "..", "/abs", ".hidden", "a\x00b",
                                 "a\\b", "x" * 129, "", "a/../../b", "ok..no"])
def test_session_ids_cannot_escape_spool_or_export(tmp_path: Path, sid: str):
    with pytest.raises(InvalidInput):
        spool_file(tmp_path / "spool", sid)
    with SessionDB(tmp_path / "state.db") as db:
        with pytest.raises(InvalidInput):
            db.create_session(sid, source="test")
        with pytest.raises(InvalidInput):
            db.append_message(sid, {"role": "user", "content": "x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]  # no spool, nothing else


def test_reports_carry_no_message_text(hermes_home: Path):
    with SessionDB.open() as db:
        fill(db)
    store = str(hermes_home / "state.db")
    for argv in (["sessions", "recover", "--source", store, "--inspect-only", "--json"],
                 ["sessions", "stats", "--json"], ["doctor", "--json"],
                 ["sessions", "list", "--json"], ["sessions", "import-spool", "--json"]):
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code in (0, 3), (argv, result.output)
        assert SECRET not in result.output, argv
    insp = hstate_recovery.inspect(store)
    assert SECRET not in json.dumps(insp.to_dict(), default=str)
