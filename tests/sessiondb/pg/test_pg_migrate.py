"""`hermes sessions migrate`: SQLite to PostgreSQL and back, interrupted
(kill -9) and rerun, counts verified, the source never changed."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import psycopg
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from sessiondb.rows.codec import uid_text
from sessiondb.base.paths import store_path

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def fill(db: SessionDB, sessions: int = 3, per: int = 40) -> None:
    db.create_session("root", source="cli", title="root")
    for s in range(sessions):
        sid = db.create_session(f"s{s}", source="agent", title=f"session {s}",
                                parent_session_id="root" if s else None)
        ids = db.append_messages(sid, [{"role": "user" if i % 2 else "assistant",
                                        "content": f"message {i} of {sid} deploy", "timestamp": i}
                                       for i in range(per)])
        db.record_usage(sid, input_tokens=10, output_tokens=5)
        db.append_message(sid, {"role": "tool", "tool_call_id": "t", "content": "nul\x00 \ue000 ok"})
        if s == 0:
            db.archive_and_compact(sid, ids[:5], {"role": "user", "content": "summary of five"})


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def duplicates(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT session_id, uid FROM messages GROUP BY 1, 2"
                            " HAVING count(*) > 1").fetchall()


def test_migrate_to_and_back(open_store, hermes_home, pg_db_url, tmp_path):
    db = open_store()
    fill(db)
    db.close()
    path = store_path(hermes_home)
    before = digest(path)
    res = run("sessions", "migrate", "--to", pg_db_url, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["verified"] and out["source_counts"]["messages"] == 3 * 41 + 1
    assert out["source_counts"]["compactions"] == 1 and out["source_counts"]["usage_ledger"] == 3
    assert "@" in out["target"] and "\r" not in res.output  # no bar when piped
    assert digest(path) == before
    again = json.loads(run("sessions", "migrate", "--to", pg_db_url, "--json").output)
    assert again["verified"] and again["copied"]["messages"] == 0 and again["resumed_after"]
    assert duplicates(pg_db_url) == []
    back_home = tmp_path / "back"
    res = run("--home", str(back_home), "sessions", "migrate", "--from", pg_db_url, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["target_counts"] == out["source_counts"]
    copy = open_store(store_path(back_home))
    assert copy.get_session("s1").parent_session_id == "root"
    assert [m["content"] for m in copy.get_messages("s2")] == \
        [m["content"] for m in open_store().get_messages("s2")]
    assert copy.search("deploy", session_id="s2", limit=5)
    with SessionDB.open(url=pg_db_url) as pg:  # the migrated rows are the store's own
        for sid in ("s0", "s1", "s2"):
            assert pg.get_messages(sid, include_archived=True) == \
                open_store().get_messages(sid, include_archived=True)
        assert pg.get_session("s0").message_count == open_store().get_session("s0").message_count
        assert pg.search("deploy", session_id="s1", limit=5)


def test_killed_migrate_reruns_to_exactly_one_copy(open_store, hermes_home, pg_db_url):
    db = open_store()
    fill(db, sessions=4, per=500)
    db.close()
    path = store_path(hermes_home)
    before = digest(path)
    script = ("import importlib, sys, time\n"
              # the module (the package's own `transfer` is its function)
              "transfer = importlib.import_module('sessiondb.pg.transfer')\n"
              "transfer.MESSAGE_CHUNK = 25\n"
              "transfer.bulk.COPY_CHUNK = 25\n"
              "with transfer.ends(sys.argv[1], sys.argv[2], to_pg=True) as (s, d):\n"
              "    transfer.transfer(s, d, progress=lambda n: time.sleep(0.02))\n")
    child = subprocess.Popen([sys.executable, "-c", script, str(path), pg_db_url], cwd=ROOT,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    deadline = time.monotonic() + 60
    with psycopg.connect(pg_db_url, autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM messages").fetchone()[0] < 300:
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        copied = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert 300 <= copied < 2005  # killed mid-copy
    res = run("sessions", "migrate", "--to", pg_db_url, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["verified"] and out["resumed_after"] > 0
    assert out["target_counts"]["messages"] == 4 * 501 + 1
    assert duplicates(pg_db_url) == []
    with psycopg.connect(pg_db_url) as conn:
        order = conn.execute("SELECT session_id, uid FROM messages ORDER BY id").fetchall()
    source = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:  # target ids follow the source's row order across the kill
        stored = source.execute("SELECT session_id, uid FROM messages ORDER BY id")
        assert order == [(sid, uid_text(uid)) for sid, uid in stored]  # (m010: uid bytes)
    finally:
        source.close()
    assert digest(path) == before


def test_bad_urls_and_arguments(open_store, pg_server):
    open_store().close()
    res = run("sessions", "migrate", "--to", "mysql://x/y")
    assert res.exit_code == 2 and "Error: a store URL starts with postgresql://" in res.output
    missing = pg_server.url("no_such_db")
    res = run("sessions", "migrate", "--to", missing)
    assert res.exit_code == 1 and res.output.startswith("Error: cannot connect to")
    assert "Traceback" not in res.output
    assert run("sessions", "migrate").exit_code == 2
    assert run("sessions", "migrate", "--to", missing, "--from", missing).exit_code == 2


def test_foreign_source_is_refused_untouched(hermes_home, pg_db_url):
    import apsw
    path = store_path(hermes_home)
    path.parent.mkdir(parents=True, mode=0o700)
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE notes(x)")
    conn.close()
    before = digest(path)
    res = run("sessions", "migrate", "--to", pg_db_url)
    assert res.exit_code == 1 and "not a hermes-state store" in res.output
    assert digest(path) == before


def _peak_rss_mb(path: Path, url: str) -> float:
    script = ("import importlib, resource, sys\n"
              "transfer = importlib.import_module('sessiondb.pg.transfer')\n"
              "with transfer.ends(sys.argv[1], sys.argv[2], to_pg=True) as (s, d):\n"
              "    assert transfer.transfer(s, d).verified\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n")
    done = subprocess.run([sys.executable, "-c", script, str(path), url], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=300, check=True)
    return float(done.stdout.split()[-1])


def test_migrate_memory_is_bounded(open_store, tmp_path, pg_databases):
    """40 MB of message text moves with a peak RSS within 20 MB of a tiny store's."""
    small, big = tmp_path / "small.db", tmp_path / "big.db"
    for path, count in ((small, 10), (big, 2000)):
        db = open_store(path)
        db.create_session("s", source="cli")
        for start in range(0, count, 100):
            db.append_messages("s", [{"role": "user", "content": f"{i} " + "x" * 20_000}
                                     for i in range(start, min(count, start + 100))])
        db.close()
    grown = _peak_rss_mb(big, pg_databases.create()) - _peak_rss_mb(small, pg_databases.create())
    assert grown < 20, f"peak RSS grew {grown:.0f} MB for 40 MB of text"
