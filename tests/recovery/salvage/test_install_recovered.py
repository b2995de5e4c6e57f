"""`hermes sessions install-recovered NEW`: the runbook's manual mv sequence
as one command that refuses while the store is held, keeps the replaced
bundle in a 0700 directory, imports the spool and runs doctor."""
from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB, StoreCorrupt
from sessiondb.importers.spool_import import spool_failed_write
from tests.helpers import damage
from tests.helpers.stores import fill_home, held_by_another_process, sha


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def recovered_store(home: Path) -> tuple[Path, Path]:
    """A home whose store lost a leaf page, recovered beside it (.partial)."""
    db = fill_home(home)
    tree = damage.TableTree(db, "messages")  # (smash at the file's page size, not 1 KiB)
    damage.smash_page(db, tree.middle_leaf(), tree.page_size)
    res = run("sessions", "recover", "--source", str(db), "--output",
              str(home / "state.recovered.db"))
    out = next(home.glob("state.recovered.db*"))
    assert res.exit_code in (0, 3), res.output
    return db, out


def test_recover_says_install_next_and_install_does_the_mv_sequence(hermes_home: Path) -> None:
    db, out = recovered_store(hermes_home)
    damaged = sha(db)
    with SessionDB(out) as new:  # a message spooled while the store was broken
        new.create_session("later", source="t")
    err = StoreCorrupt("x", path=str(db))
    with SessionDB(hermes_home / "other.db") as other:
        other.create_session("later", source="t")
        spool_failed_write(other.core, "later", [{"role": "user", "content": "from the spool"}],
                           err)
    res = run("sessions", "recover", "--source", str(db), "--output",
              str(hermes_home / "again.db"))
    step = res.output.strip().splitlines()[-1]
    assert step == "next: " + shlex.join(["hermes", "--home", str(hermes_home), "sessions",
                                          "install-recovered", str(hermes_home / "again.db")
                                          + (".partial" if res.exit_code == 3 else "")])
    res = run("sessions", "install-recovered", str(out), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    aside = Path(doc["aside_dir"])
    assert stat.S_IMODE(os.stat(aside).st_mode) == 0o700
    assert sha(aside / "state.db") == damaged  # the damaged file, kept as it was
    assert not out.exists() and db.exists()
    assert doc["spool"]["imported"] == 1 and doc["worst"] in ("ok", "info")
    with SessionDB.open(hermes_home) as store:
        assert [m["content"] for m in store.get_messages("later")] == ["from the spool"]
    assert run("doctor").exit_code == 0


def test_refuses_while_another_process_holds_the_store(hermes_home: Path) -> None:
    db, out = recovered_store(hermes_home)
    before, new_before = sha(db), sha(out)
    with held_by_another_process(db) as pid:
        res = run("sessions", "install-recovered", str(out))
    assert res.exit_code == 1 and f"held by process {pid}" in res.output
    assert "nothing was changed" in res.output
    assert sha(db) == before and sha(out) == new_before
    assert not list(hermes_home.glob("replaced-*"))


def test_refuses_what_is_not_an_installable_store(hermes_home: Path, tmp_path: Path) -> None:
    db = fill_home(hermes_home)
    junk = hermes_home / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    for new, words in ((junk, "cannot be read as a database"), (db, "is the store itself"),
                       (hermes_home / "missing.db", "is not a regular file")):
        res = run("sessions", "install-recovered", str(new))
        assert res.exit_code == 1 and words in res.output, res.output
        assert "Traceback" not in res.output
    assert not list(hermes_home.glob("replaced-*"))


def test_doctor_points_a_rescued_copy_to_install(hermes_home: Path) -> None:
    """Before: doctor said "recover from it", and inspect said "nothing to do"."""
    db = fill_home(hermes_home)
    rescued = hermes_home / "state.db.rescued-20260101T000000"
    rescued.write_bytes(db.read_bytes())
    rescued.chmod(0o600)
    res = run("doctor", "--json")
    finding = next(f for f in json.loads(res.stdout)["findings"] if f["id"] == "quarantine")
    assert shlex.split(finding["fix"])[3:] == ["sessions", "install-recovered", str(rescued)]
    res = run(*shlex.split(finding["fix"])[1:])
    assert res.exit_code == 0, res.output
    assert run("doctor").exit_code == 0


def test_another_programs_file_in_the_stores_place_is_never_moved(tmp_path: Path) -> None:
    """A Hermes Agent state.db at the store's path is that program's live
    database: install-recovered refuses and leaves it where it is."""
    from tests.helpers.foreign_dbs import build_hermes_agent
    ours = tmp_path / "ours"
    _db, new = recovered_store(ours)
    home = tmp_path / "hstate_agent-home"
    home.mkdir(mode=0o700)
    build_hermes_agent(home / "state.db", sessions=3, messages=4)
    before = {p.name: sha(p) for p in home.iterdir()}
    res = run("--home", str(home), "sessions", "install-recovered", str(new))
    assert res.exit_code == 1, res.output
    assert "is Hermes Agent state.db" in res.output and "Traceback" not in res.output
    assert {p.name: sha(p) for p in home.iterdir()} == before
    assert new.exists()
