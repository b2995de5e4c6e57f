"""`import-spool` when one file is bad: it is named, the rest are imported,
`--json` is complete; "moved" only for files moved; an empty spool file does
not keep doctor warning (nor `doctor --fix` claiming it fixed it)."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB, StoreCorrupt
from sessiondb.importers.spool_import import spool_dir_for, spool_failed_write


def spool_good(db: SessionDB, sid: str, text: str) -> Path:
    err = StoreCorrupt("test", path=str(db.path))
    path = spool_failed_write(db.core, sid, [{"role": "user", "content": text}], err)
    assert path is not None
    return path


def bad_id_file(directory: Path) -> Path:
    bad = directory / "zz-bad.jsonl"
    lines = [{"kind": "session", "version": 1, "session_id": "../escape"},
             {"kind": "message", "session_id": "../escape", "uid": "u1", "timestamp": 1.0,
              "message": {"role": "user", "content": "x"}}]
    bad.write_text("".join(json.dumps(r) + "\n" for r in lines))
    bad.chmod(0o600)
    return bad


def test_one_bad_file_does_not_abort_the_run(hermes_home: Path) -> None:
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        db.create_session("s2", source="t")
        spool_good(db, "s1", "first")
        spool_good(db, "s2", "second")
        bad = bad_id_file(spool_dir_for(db.path))
    res = CliRunner().invoke(cli, ["sessions", "import-spool", "--json"])
    assert res.exit_code == 1  # not 2 with the root usage line
    doc = json.loads(res.stdout)
    assert doc["imported"] == 2 and doc["problems"] == 1
    (failed,) = [f for f in doc["files"] if f["error"]]
    assert failed["file"] == str(bad) and "invalid session id" in failed["error"]
    assert failed["moved_to"] is None and bad.exists()
    with SessionDB.open() as db:
        assert [m["content"] for m in db.get_messages("s1")] == ["first"]
        assert [m["content"] for m in db.get_messages("s2")] == ["second"]


def test_human_output_says_moved_only_for_files_moved(hermes_home: Path) -> None:
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        spool_good(db, "s1", "first")
        bad = bad_id_file(spool_dir_for(db.path))
    res = CliRunner().invoke(cli, ["sessions", "import-spool"])
    assert res.exit_code == 1
    rows = {ln.split()[1]: ln for ln in res.stdout.splitlines()[2:] if ln.strip()
            and len(ln.split()) > 1 and ln.split()[1].endswith(".jsonl")}
    assert "moved to imported/" in rows["s1.jsonl"]
    assert "moved" not in rows["zz-bad.jsonl"] and "not imported" in rows["zz-bad.jsonl"]
    assert f"Error: {bad}: invalid session id" in res.stderr
    assert "Usage:" not in res.output


def test_an_empty_spool_file_does_not_warn_forever(hermes_home: Path) -> None:
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        empty = spool_dir_for(db.path) / "s1.jsonl"
    empty.write_bytes(b"")
    empty.chmod(0o600)
    res = CliRunner().invoke(cli, ["doctor", "--fix", "--json"])
    doc = json.loads(res.stdout)
    spool = next(f for f in doc["findings"] if f["id"] == "spool")
    assert spool["severity"] == "ok"  # the empty file was set aside
    assert not empty.exists()
    assert list((empty.parent / "imported").glob("s1.*.jsonl"))


def test_doctor_fix_does_not_claim_a_spool_it_could_not_import(hermes_home: Path) -> None:
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        bad_id_file(spool_dir_for(db.path))
    res = CliRunner().invoke(cli, ["doctor", "--fix", "--json"])
    doc = json.loads(res.stdout)
    assert not any("spool" in line for line in doc["applied"])
    spool = next(f for f in doc["findings"] if f["id"] == "spool")
    assert spool["severity"] == "warn"
