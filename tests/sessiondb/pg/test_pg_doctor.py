"""`hermes doctor --store-url`: the PostgreSQL checks, healthy and not."""
from __future__ import annotations

import json
import threading

import psycopg
from click.testing import CliRunner

from hstate_cli.main import cli

CHECKS = {"pg_connect", "pg_version", "pg_schema", "pg_search_index", "pg_locks",
          "pg_replication"}


def doctor(url: str, *args: str):
    res = CliRunner().invoke(cli, ["--store-url", url, "doctor", *args])
    assert "Traceback" not in res.output
    return res


def findings(url: str) -> dict[str, dict]:
    res = doctor(url, "--json")
    doc = json.loads(res.output)
    assert set(doc) == {"healthy", "worst", "applied", "refused", "findings", "size"}
    return {f["check"]: {**f, "exit": res.exit_code} for f in doc["findings"]}


def test_healthy_store(pg_db_url):
    found = findings(pg_db_url)
    assert CHECKS <= set(found)
    assert all(found[c]["severity"] == "ok" for c in CHECKS), found
    assert found["pg_replication"]["data"] == {"role": "primary"}
    assert found["pg_schema"]["data"]["pending"] == []
    assert found["pg_connect"]["exit"] == 0


def test_env_var_names_the_store(pg_db_url, monkeypatch):
    monkeypatch.setenv("HERMES_STORE_URL", pg_db_url)
    res = CliRunner().invoke(cli, ["doctor"])
    assert res.exit_code == 0 and "pg_search_index" in res.output


def test_pending_migrations_and_invalid_index(pg_db_url):
    with psycopg.connect(pg_db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM migrations WHERE name = 'p010_search_index'")
        conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid ="
                     " 'messages_search_trgm'::regclass")
    found = findings(pg_db_url)
    assert found["pg_schema"]["severity"] == "warn"
    assert found["pg_schema"]["data"]["pending"] == ["p010_search_index"]
    assert found["pg_search_index"]["severity"] == "error"
    assert found["pg_search_index"]["data"]["indexes"]["messages_search_trgm"] == "invalid"
    assert found["pg_connect"]["exit"] == 4


def test_dropped_index_and_waiting_lock(pg_db_url):
    holder = psycopg.connect(pg_db_url)
    holder.execute("DROP INDEX messages_search_tsv")
    holder.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")  # held, uncommitted
    waiter = psycopg.connect(pg_db_url, autocommit=True)
    blocked = threading.Thread(target=lambda: waiter.execute("SELECT count(*) FROM sessions"))
    blocked.start()
    try:
        found = {}
        for _ in range(50):
            found = findings(pg_db_url)
            if found["pg_locks"]["severity"] == "warn":
                break
        assert found["pg_locks"]["severity"] == "warn"
        assert any(s["waiting"] for s in found["pg_locks"]["data"]["sessions"])
        # the DROP is not committed: other sessions still see a valid index
        assert found["pg_search_index"]["severity"] == "ok"
    finally:
        holder.commit()
        blocked.join(10)
        waiter.close()
    found = findings(pg_db_url)
    assert found["pg_search_index"]["data"]["indexes"]["messages_search_tsv"] == "missing"
    assert found["pg_locks"]["severity"] == "ok"
    holder.close()


def test_unreachable_server_is_one_error(pg_server):
    res = doctor(pg_server.url("no_such_database"))
    assert res.exit_code == 4 and "cannot connect to" in res.output
    assert CliRunner().invoke(cli, ["--store-url", "postgresql://x/y", "doctor",
                                    "--fix"]).exit_code == 2
