"""Doctor on a store that reads fine but cannot take a write: a write lock held
for minutes, an immutable file, a -wal deleted under a live writer. Before
these checks doctor exited 0 ("info") in all three, and called the -shm
left without its deleted -wal "harmless"."""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_recovery.doctor import doctor_health
from tests.helpers.stores import fill_home, held_by_another_process

ROOT = Path(__file__).resolve().parents[3]


def run_doctor(home: Path) -> tuple[int, dict[str, dict]]:
    res = CliRunner().invoke(cli, ["--home", str(home), "doctor", "--json"])
    doc = json.loads(res.stdout)
    return res.exit_code, {f["id"]: f for f in doc["findings"]}


def test_a_write_lock_held_for_minutes_is_an_error(hermes_home: Path) -> None:
    db = fill_home(hermes_home)
    with held_by_another_process(db) as pid:
        code, found = run_doctor(hermes_home)
        assert code == 3 and found["write_lock"]["severity"] == "warn"  # just taken
        assert str(pid) in found["write_lock"]["message"]
        past = time.time() - 200  # as if it had sat on the lock for 200 s
        for f in (db, Path(f"{db}-wal")):
            os.utime(f, (past, past))
        code, found = run_doctor(hermes_home)
        assert code == 4
        lock = found["write_lock"]
        assert lock["severity"] == "error" and str(pid) in lock["message"]
        assert re.search(r"has not changed for (19\d|20\d) s", lock["message"])
        assert lock["fix"].startswith(f"stop process {pid}")
        # The probe ran on a private copy: the holder's lock was not contended.
        assert found["write_probe"]["severity"] == "ok"
        assert "private copy" in found["write_probe"]["message"]


def test_healthy_store_passes_the_write_probe_and_is_unchanged(hermes_home: Path) -> None:
    db = fill_home(hermes_home)
    before = db.read_bytes()
    code, found = run_doctor(hermes_home)
    assert code == 0 and found["write_probe"]["severity"] == "ok"
    assert found["write_lock"]["severity"] == "ok"
    assert db.read_bytes() == before
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0


@pytest.fixture
def immutable_store(hermes_home: Path) -> Iterator[Path]:
    db = fill_home(hermes_home)
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        pytest.skip("this filesystem (or user) cannot set the immutable attribute")
    try:
        yield db
    finally:
        subprocess.run(["chattr", "-i", str(db)], capture_output=True)


def test_an_immutable_store_is_an_error_with_the_way_out(immutable_store: Path,
                                                         hermes_home: Path) -> None:
    code, found = run_doctor(hermes_home)
    assert code == 4
    probe = found["write_probe"]
    assert probe["severity"] == "error" and "immutable (chattr +i)" in probe["message"]
    assert probe["fix"].startswith(f"as root: chattr -i {immutable_store}")


def test_commands_on_an_immutable_store_never_mention_a_spool(immutable_store: Path,
                                                              hermes_home: Path) -> None:
    """Only what was really spooled is mentioned: the chat turn's line (the
    spool's folder is writable), never a spool for a command that keeps no
    messages."""
    for args in (["sessions", "list"], ["chat", "--offline", "-q", "hello"],
                 ["sessions", "rename", "shared", "new title"]):
        res = CliRunner().invoke(cli, args)
        if args[0] == "chat":
            (spooled,) = (hermes_home / "spool").glob("*.jsonl")
            assert str(spooled) in res.output and '"hello"' in spooled.read_text()
        else:
            assert "spool" not in res.output, (args, res.output)
        assert "Traceback" not in res.output


@pytest.fixture
def deleted_wal(hermes_home: Path) -> Iterator[tuple[Path, int]]:
    hermes_home.mkdir(mode=0o700)
    db = hermes_home / "state.db"
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.walkeeper", str(db), "200"],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.unlink(f"{db}-wal")  # an operator "cleaning up"; the writer keeps it open
        yield db, proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_wal_deleted_under_a_live_writer_names_the_process(
        deleted_wal: tuple[Path, int], hermes_home: Path) -> None:
    db, pid = deleted_wal
    code, found = run_doctor(hermes_home)
    assert code == 4
    gone = found["deleted_wal"]
    assert gone["severity"] == "error" and f"process {pid}" in gone["message"]
    assert "only copy" in gone["message"] and f"/proc/{pid}/fd/" in gone["message"]
    assert found["sidecars"]["severity"] == "error"
    assert "harmless" not in found["sidecars"]["message"]
    opened = found.get("open")
    if opened is not None:  # a reader may not open it at all: not "a disk I/O error"
        assert "read/write error" not in opened["message"]


def test_the_rescue_doctor_prints_keeps_the_newest_messages(
        deleted_wal: tuple[Path, int], hermes_home: Path) -> None:
    db, pid = deleted_wal
    held = doctor_health.deleted_wal_holders(db)[0]  # writer and checkpointer: same file
    rescue = hermes_home / f"wal-rescue-{pid}"
    rescue.mkdir(mode=0o700)
    (rescue / "state.db").write_bytes(db.read_bytes())
    (rescue / "state.db-wal").write_bytes(Path(held.proc_path).read_bytes())
    res = CliRunner().invoke(cli, ["sessions", "recover", "--source", str(rescue / "state.db"),
                                   "--inspect-only", "--json"])
    doc = json.loads(res.stdout)
    text = json.dumps(doc)
    assert '"messages"' in text
    assert _message_count(doc) == 200


def _message_count(doc: dict) -> int:
    for table in doc.get("tables", []):
        if isinstance(table, dict) and table.get("name") == "messages":
            return int(table.get("rows") or table.get("count") or 0)
    tables = doc.get("tables")
    if isinstance(tables, dict) and "messages" in tables:
        t = tables["messages"]
        return int(t.get("rows") or t.get("count") or 0) if isinstance(t, dict) else int(t)
    raise AssertionError(f"no messages table in {list(doc)}")
