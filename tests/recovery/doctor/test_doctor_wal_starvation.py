"""Checkpoint starvation on another program's file: a reader holding an old
snapshot keeps every checkpoint from finishing, and doctor names it (not
only, later, a big -wal); once the read ends and a checkpoint runs, ok."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import apsw
from click.testing import CliRunner

from hstate_cli.main import cli
from tests.helpers.foreign_dbs import build_hermes_agent

WRITE = textwrap.dedent("""
    import apsw, sys
    conn = apsw.Connection(sys.argv[1])
    conn.execute("PRAGMA wal_autocheckpoint=0")
    for k in range(int(sys.argv[2])):
        with conn:
            conn.execute("INSERT INTO state_meta VALUES (?, 'x')", (f"{sys.argv[3]}{k}",))
    print(conn.execute("PRAGMA wal_checkpoint(" + sys.argv[4] + ")").fetchall())
""")
READ = textwrap.dedent("""
    import apsw, sys
    conn = apsw.Connection(sys.argv[1])
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM messages").fetchall()
    print("ready", flush=True)
    sys.stdin.read()
""")


def write(db: Path, rows: int, tag: str, checkpoint: str = "PASSIVE") -> str:
    return subprocess.run([sys.executable, "-c", WRITE, str(db), str(rows), tag, checkpoint],
                          capture_output=True, text=True, check=True, timeout=60).stdout


def wal_finding(home: Path) -> dict:
    doc = json.loads(CliRunner().invoke(cli, ["--home", str(home), "doctor", "--json"]).stdout)
    return next(f for f in doc["findings"] if f["id"] == "wal_checkpoint")


def test_a_reader_pinning_an_old_snapshot_is_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    db = home / "state.db"
    build_hermes_agent(db, sessions=4, messages=8)
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    assert wal_finding(home)["severity"] == "ok"
    reader = subprocess.Popen([sys.executable, "-c", READ, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        write(db, 5, "before")  # the reader's snapshot stays where it began
        assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
        write(db, 20, "after")  # frames past it: a checkpoint cannot copy them
        found = wal_finding(home)
        assert found["severity"] == "warn", found
        assert f"process {reader.pid}" in found["message"]
        assert "checkpoint starvation" in found["message"] and found["fix"].startswith(
            f"end the long read in process {reader.pid}")
        assert found["data"]["backfilled"] < found["data"]["frames"]
    finally:
        assert reader.stdin is not None
        reader.stdin.close()
        reader.wait(timeout=30)
    write(db, 1, "last", "TRUNCATE")
    assert wal_finding(home)["severity"] == "ok"
