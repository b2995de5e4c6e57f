"""A store found structurally damaged takes no writes from any process until
it is recovered, repaired or checked clean: the finding is recorded beside
the store (``state.db.quarantined``) and every handle reads it at open.

Before: doctor reported the damage (exit 4) and said hermes would not write
to the file; `hermes chat --offline -q hello` in the next process then
exited 0 and added a session to it.
"""
from __future__ import annotations

import json
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB, StoreCorrupt
from sessiondb.engine import read_record, record_damage
from tests.helpers.damage import smash_middle_leaves
from tests.helpers.stores import fill_home

ROOT = Path(__file__).resolve().parents[2]


def hermes(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a process of its own."""
    script = Path(sys.executable).with_name("hermes")
    return subprocess.run([str(script), "--home", str(home), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def session_ids(db: Path) -> list[str]:
    import apsw
    conn = apsw.Connection(f"file:{db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY
                           | apsw.SQLITE_OPEN_URI)
    try:
        return sorted(r[0] for r in conn.execute("SELECT id FROM sessions"))
    finally:
        conn.close()


@pytest.fixture
def damaged_home(hermes_home: Path) -> Path:
    db = fill_home(hermes_home, n=600)
    smash_middle_leaves(db, "messages")
    return hermes_home


def test_doctor_in_one_process_stops_chat_in_the_next(damaged_home: Path) -> None:
    db = damaged_home / "state.db"
    doc = hermes(damaged_home, "doctor", "--json")
    assert doc.returncode == 4, doc.stdout + doc.stderr
    record = db.with_name("state.db.quarantined")
    assert record.is_file() and stat.S_IMODE(record.stat().st_mode) == 0o600
    assert json.loads(record.read_text())["found_by"] == "doctor"
    before = session_ids(db)

    chat = hermes(damaged_home, "chat", "--offline", "-q", "hello")
    assert chat.returncode == 1, chat.stdout + chat.stderr
    assert "session_persistence_failed:corrupt" in chat.stderr
    assert session_ids(db) == before  # nothing was written
    spooled = list((damaged_home / "spool").glob("*.jsonl"))
    assert len(spooled) == 1 and '"hello"' in spooled[0].read_text()  # the turn is kept

    # The same refusal through the library, in this (third) process.
    with SessionDB.open(damaged_home) as store:
        assert store.get_session("shared").id == "shared"  # reading still works
        with pytest.raises(StoreCorrupt, match="recovered, repaired or found clean"):
            store.append_messages("shared", [{"role": "user", "content": "x"}])


def test_a_handle_that_meets_the_damage_records_it(damaged_home: Path) -> None:
    """A write that hits structural damage in one process; a second process's
    write is refused before it touches the file."""
    worker = ("import sys\nfrom sessiondb import SessionDB, StoreCorrupt\n"
              "with SessionDB.open(sys.argv[1]) as db:\n"
              "    try:\n"
              "        db.delete_session('shared')\n"  # reads every page of its messages
              "    except StoreCorrupt:\n"
              "        print('quarantined')\n")
    res = subprocess.run([sys.executable, "-c", worker, str(damaged_home)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert res.stdout.strip() == "quarantined", res.stdout + res.stderr
    rec = read_record(damaged_home / "state.db")
    assert rec is not None and rec.found_by == "a store handle"
    chat = hermes(damaged_home, "chat", "--offline", "-q", "hello")
    assert chat.returncode == 1 and "corrupt" in chat.stderr


def test_recover_and_install_clear_the_record(damaged_home: Path) -> None:
    assert hermes(damaged_home, "doctor").returncode == 4
    db = damaged_home / "state.db"
    out = damaged_home / "state.recovered.db"
    rec = CliRunner().invoke(cli, ["--home", str(damaged_home), "sessions", "recover",
                                   "--source", str(db), "--output", str(out)])
    assert rec.exit_code in (0, 3), rec.output
    step = [ln for ln in rec.output.splitlines() if "install-recovered" in ln][-1]
    step = step.split(": ", 1)[1] if step.lower().startswith("next: ") else step.strip()
    inst = CliRunner().invoke(cli, shlex.split(step)[1:])
    assert inst.exit_code == 0, inst.output
    assert read_record(db) is None
    assert hermes(damaged_home, "chat", "--offline", "-q", "hello").returncode == 0


def test_a_clean_full_check_clears_a_record(hermes_home: Path) -> None:
    db = fill_home(hermes_home, n=20)
    record_damage(db, "found by a test", "a test")
    with SessionDB.open(hermes_home) as store:
        with pytest.raises(StoreCorrupt):
            store.create_session("new", source="t")
    plain = CliRunner().invoke(cli, ["--home", str(hermes_home), "doctor", "--json"])
    ids = {f["id"]: f for f in json.loads(plain.stdout)["findings"]}
    assert ids["damage_record"]["severity"] == "error"
    assert "doctor --full" in ids["damage_record"]["fix"]
    full = CliRunner().invoke(cli, ["--home", str(hermes_home), "doctor", "--full"])
    assert "cleared the damage record" in full.output, full.output
    assert read_record(db) is None
    with SessionDB.open(hermes_home) as store:
        store.create_session("new", source="t")


def test_a_file_put_in_place_is_not_the_recorded_one(hermes_home: Path) -> None:
    """The record names the damaged file (device, inode): a file moved into its
    place by hand is not refused for the old file's damage."""
    db = fill_home(hermes_home, n=5)
    record_damage(db, "found by a test", "a test")
    other = hermes_home / "other.db"
    other.write_bytes(db.read_bytes())
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    other.replace(db)
    with SessionDB.open(hermes_home) as store:
        store.create_session("new", source="t")
