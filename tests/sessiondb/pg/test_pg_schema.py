"""The PostgreSQL schema: its migrations, applied once even when several
hosts open a new database at the same moment (real processes, real server)."""
from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from sessiondb.pg import migrations

WORKER = """
import sys, psycopg
from sessiondb.pg import migrations
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    print(",".join(migrations.apply_pending(conn)))
"""


@pytest.fixture
def empty_url(pg_databases) -> str:
    url = pg_databases.create(schema=False)
    yield url
    pg_databases.drop(url)


def test_migrations_are_small_named_and_ordered() -> None:
    names = [m.__name__ for m in migrations.MIGRATIONS]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert all(n.startswith("p0") and m.__doc__ for n, m in
               zip(names, migrations.MIGRATIONS))


def test_fresh_database_gets_every_table(empty_url: str) -> None:
    with psycopg.connect(empty_url, autocommit=True) as conn:
        assert migrations.pending(conn) == [m.__name__ for m in migrations.MIGRATIONS]
        applied = migrations.apply_pending(conn)
        assert applied == [m.__name__ for m in migrations.MIGRATIONS]
        assert migrations.pending(conn) == [] and migrations.unknown(conn) == []
        tables = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert {"sessions", "messages", "leases", "compactions", "usage_ledger",
                "state_meta", "session_flags", "migrations"} <= tables
        assert migrations.apply_pending(conn) == []  # a second run has nothing to do


def test_concurrent_first_opens_apply_each_migration_once(empty_url: str) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, empty_url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [e for _, e in outs]
    applied = [n for out, _ in outs for n in out.strip().split(",") if n]
    assert sorted(applied) == sorted(m.__name__ for m in migrations.MIGRATIONS)
    with psycopg.connect(empty_url) as conn:
        rows = conn.execute("SELECT name FROM migrations ORDER BY seq").fetchall()
    assert [r[0] for r in rows] == [m.__name__ for m in migrations.MIGRATIONS]


def test_a_failing_migration_leaves_neither_its_tables_nor_its_row(empty_url: str) -> None:
    def p999_broken(conn) -> None:
        """Creates a table, then fails."""
        conn.execute("CREATE TABLE half_done (x int)")
        conn.execute("SELECT no_such_function()")
    with psycopg.connect(empty_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedFunction):
            migrations.apply_pending(conn, migrations.MIGRATIONS + (p999_broken,))
        assert conn.execute("SELECT to_regclass('half_done')").fetchone()[0] is None
        assert migrations.pending(conn, migrations.MIGRATIONS + (p999_broken,)) == \
            ["p999_broken"]
        # the lock was released: another session can take it at once
        assert conn.execute("SELECT pg_try_advisory_lock(%s)",
                            (migrations.MIGRATION_LOCK,)).fetchone()[0]
