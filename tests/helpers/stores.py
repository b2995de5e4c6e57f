"""Stores for the doctor and repair tests: filled, damaged, held by another process."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import apsw

from sessiondb import SessionDB
from sessiondb.index import search_index

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
QUERIES = ("alpha", "bravo", "charlie delta", '"echo foxtrot"', "gol*", "n17")


def fill_home(home: Path, n: int = 120) -> Path:
    """A home with one session of ``n`` messages; returns the store's path."""
    with SessionDB.open(home) as db:
        db.create_session("shared", source="test", title="Doctor")
        db.append_messages("shared", [
            {"role": "user" if i % 2 else "assistant",
             "content": " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 6)) + f" n{i}"}
            for i in range(n)])
    return home / "state.db"


def results(home: Path) -> dict[str, list[int]]:
    with SessionDB.open(home) as db:
        return {q: sorted(h.message_id for h in db.search(q, limit=1000)) for q in QUERIES}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def raw_sql(path: Path, *statements: str) -> None:
    """Change a closed store directly (how an older or damaged file looks)."""
    conn = apsw.Connection(str(path))
    try:
        for sql in statements:
            conn.execute(sql).fetchall()
    finally:
        conn.close()


def make_old_schema(path: Path) -> None:
    """The store as written before the search migration existed."""
    conn = apsw.Connection(str(path))
    try:
        search_index.drop_triggers(conn)
        for table in search_index.INDEXES:
            conn.execute(f"DROP TABLE {table}")
        conn.execute(f"DROP VIEW {search_index.TEXT_VIEW}")
        conn.execute("DELETE FROM migrations WHERE name = 'm004_search_index'")
    finally:
        conn.close()


def mark_stale(path: Path) -> None:
    conn = apsw.Connection(str(path))
    try:
        with conn:
            search_index.mark_stale(conn, "test: a failed write", None)
    finally:
        conn.close()


@contextmanager
def held_by_another_process(path: Path) -> Iterator[int]:
    """A real second process with the store open (and its write lock)."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.lockholder", str(path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(timeout=30)
