"""Another program's file at the store's path (Hermes Agent's state.db, llm's
logs.db): doctor looks inside it (on inspect's private snapshot) and agrees
with inspect; recover writes the program's own format and ends with the
install-recovered command; install-recovered puts that file back.

Before: doctor ran 4 checks (identity, free disk, SQLite version, holders)
and said "worst: warn" on a file with two pages of `messages` destroyed;
recover ended with "next: no command to run"; install-recovered refused the
recovered file as "not a hermes session store".
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.inspection import inspect
from tests.helpers.damage import smash_middle_leaves
from tests.helpers.foreign_dbs import build_hermes_agent, build_llm

BUILD = {"hermes-agent": (build_hermes_agent, "state.db", "messages"),
         "llm": (build_llm, "state.db", "responses")}


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args))


def foreign_home(tmp_path: Path, kind: str, damaged: bool) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    build, name, table = BUILD[kind]
    build(home / name)
    if damaged:
        smash_middle_leaves(home / name, table, 2)
    return home


@pytest.mark.parametrize("damaged", [False, True], ids=["healthy", "damaged"])
@pytest.mark.parametrize("kind", sorted(BUILD))
def test_doctor_looks_inside_and_agrees_with_inspect(tmp_path: Path, kind: str,
                                                     damaged: bool) -> None:
    home = foreign_home(tmp_path, kind, damaged)
    db = home / "state.db"
    before = db.read_bytes()
    res = invoke("--home", str(home), "doctor", "--json")
    doc = json.loads(res.stdout)
    found = {f["id"]: f for f in doc["findings"]}
    assert {"integrity", "fts_index", "file_size", "wal_size", "holders",
            "deleted_wal"} <= set(found)
    verdict = inspect(db).data_verdict
    expected = {"healthy": "ok", "fts_only": "warn", "structural": "error"}[verdict]
    assert found["integrity"]["severity"] == expected, found["integrity"]
    assert (res.exit_code == 4) == damaged and (verdict == "structural") == damaged
    advice = " ".join(f["fix"] or "" for f in doc["findings"])
    assert "repair" not in advice and "reindex" not in advice
    assert db.read_bytes() == before


def test_a_damaged_foreign_file_walks_to_its_own_format_back_in_place(tmp_path: Path) -> None:
    home = foreign_home(tmp_path, "hermes-agent", damaged=True)
    doc = json.loads(invoke("--home", str(home), "doctor", "--json").stdout)
    fix = next(f["fix"] for f in doc["findings"] if f["id"] == "integrity")
    rec = invoke(*shlex.split(fix)[1:])
    assert rec.exit_code in (0, 3), rec.output
    assert "stop the program that owns the file (Hermes Agent" in rec.output
    step = rec.output.strip().splitlines()[-1]
    assert step.startswith("next: hermes --home ") and "install-recovered" in step, step
    inst = invoke(*shlex.split(step[len("next: "):])[1:])
    assert inst.exit_code in (0, 3), inst.output
    assert "belongs to another program (Hermes Agent state.db" in inst.output
    (aside,) = home.glob("replaced-*")
    assert (aside / "state.db").is_file()
    after = json.loads(invoke("--home", str(home), "doctor", "--json").stdout)
    assert next(f for f in after["findings"] if f["id"] == "integrity")["severity"] == "ok"


def test_install_is_refused_while_the_owner_holds_it_and_for_another_format(
        tmp_path: Path) -> None:
    home = foreign_home(tmp_path, "hermes-agent", damaged=False)
    db = home / "state.db"
    new = home / "copy.db"
    new.write_bytes(db.read_bytes())
    other = home / "other.db"
    build_llm(other)
    res = invoke("--home", str(home), "sessions", "install-recovered", str(other))
    assert res.exit_code == 1 and "format and version" in res.output, res.output
    holder = subprocess.Popen(
        [sys.executable, "-c", "import apsw, sys; c = apsw.Connection(sys.argv[1]);"
         " c.execute('BEGIN'); c.execute('SELECT count(*) FROM sessions').fetchall();"
         " print('ready', flush=True); sys.stdin.read()", str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        res = invoke("--home", str(home), "sessions", "install-recovered", str(new))
        assert res.exit_code == 1 and "held by process" in res.output, res.output
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert invoke("--home", str(home), "sessions", "install-recovered", str(new)).exit_code \
        in (0, 3)
