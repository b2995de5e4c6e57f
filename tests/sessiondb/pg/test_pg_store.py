"""Opening a PostgreSQL store: SessionDB.open(url=...), $HERMES_STORE_URL and
`hermes --store-url`; what stays SQLite's; NUL-safe text; passwords kept out
of messages."""
from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import InvalidInput, SessionDB, StoreIOError, StoreNotFound
from sessiondb.pg.adapter import escape_text, translate, unescape_text
from sessiondb.pg.errors import NotOnPostgreSQL, redact


@pytest.fixture
def url(pg_db_url: str) -> str:
    return pg_db_url


def test_open_by_url_and_by_environment(url, hermes_home, monkeypatch) -> None:
    with SessionDB.open(url=url) as db:
        assert db.backend == "postgresql" and db.pending_migrations() == []
        db.create_session("s", source="t")
        db.append_message("s", {"role": "user", "content": "hi"})
    monkeypatch.setenv("HERMES_STORE_URL", url)
    with SessionDB.open() as db:
        assert [m["content"] for m in db.get_messages("s")] == ["hi"]
        assert db.path.parent == hermes_home  # the spool lives in the home, as before
    assert not (hermes_home / "state.db").exists()  # no SQLite file was made


def test_reading_an_empty_database_without_create_is_not_found(pg_databases,
                                                               hermes_home) -> None:
    empty = pg_databases.create(schema=False)
    try:
        with pytest.raises(StoreNotFound):
            SessionDB.open(url=empty, create=False)
        with psycopg.connect(empty) as conn:  # and nothing was created in it
            assert conn.execute("SELECT to_regclass('migrations')").fetchone()[0] is None
    finally:
        pg_databases.drop(empty)


def test_unreachable_server_is_io_error_without_the_password(pg_server, hermes_home) -> None:
    bad = f"postgresql://hermes:s3cret@/nope?host={pg_server.root}/missing"
    with pytest.raises(StoreIOError) as info:
        SessionDB.open(url=bad, patience=0.5)
    assert "s3cret" not in str(info.value) and "s3cret" not in (info.value.path or "")
    assert redact("postgresql://u:pw@h/db?password=pw") == "postgresql://u@h/db?password=***"


def test_sqlite_only_operations_and_search_say_so(url, hermes_home) -> None:
    with SessionDB.open(url=url) as db:
        for call in (db.quick_check, db.checkpoint, db.journal_mode):
            with pytest.raises(NotOnPostgreSQL, match="SQLite backend"):
                call()
        assert db.search("anything") == []  # search runs here (sessiondb/pg/search.py)
        with pytest.raises(NotOnPostgreSQL, match="FTS5"):
            db.search_health()
        assert db.index_backlog() is None and db.catch_up_index() == 0
        assert not db.can_index_now() and not db.quarantined
        with pytest.raises(InvalidInput, match="vfs"):
            SessionDB.open(url=url, vfs="faulty")


def test_text_escaping_round_trips_every_nul_and_escape_mix() -> None:
    for text in ("", "plain", "\x00", "a\x00b", "\ue000", "\ue0000", "\ue0001\x00",
                 "\x00\ue000\x00\ue0001", "😀\x00😀"):
        assert unescape_text(escape_text(text)) == text
        assert "\x00" not in escape_text(text)
    assert translate("SELECT ?1, ?2, ?1 WHERE x LIKE 'a%'") == \
        ("SELECT %s, %s, %s WHERE x LIKE 'a%%'", (0, 1, 0))


def test_cli_store_url_lists_and_counts(url, hermes_home) -> None:
    with SessionDB.open(url=url) as db:
        db.create_session("s", source="cli", title="on the server")
        db.append_message("s", {"role": "user", "content": "hello"})
    runner = CliRunner()
    listed = runner.invoke(cli, ["--store-url", url, "sessions", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [s["id"] for s in json.loads(listed.output)["sessions"]] == ["s"]
    stats = runner.invoke(cli, ["--store-url", url, "sessions", "stats", "--json"])
    doc = json.loads(stats.output)
    assert (doc["sessions"], doc["messages"], doc["files"]) == (1, 1, None)
    assert doc["postgresql"]["server_version"].startswith("15")
    human = runner.invoke(cli, ["--store-url", url, "sessions", "stats"])
    assert human.exit_code == 0 and "PostgreSQL" in human.output
    env = runner.invoke(cli, ["sessions", "list", "--json"], env={"HERMES_STORE_URL": url})
    assert json.loads(env.output)["sessions"][0]["title"] == "on the server"


def test_cli_bad_store_url_is_a_usage_error(hermes_home: Path) -> None:
    result = CliRunner().invoke(cli, ["--store-url", "mysql://x", "sessions", "list"])
    assert result.exit_code == 2
    assert "must start with postgresql://" in result.output
    assert not (hermes_home / "state.db").exists()


def test_copy_table_for_a_server_store_names_its_url_and_parses() -> None:
    from sessiondb.base.errors import Cause
    from sessiondb.base.explain import all_causes, describe
    from tests.helpers.cliparse import parse_hermes
    shown = "postgresql://agent@db.internal/hermes"
    for cause in all_causes():
        for spooled in (None, "/h/spool/s.jsonl"):
            failure = describe(cause, db_path=shown, home="/h", spooled_to=spooled)
            assert failure.summary.endswith(".") and "state.recovered" not in failure.summary
            for action in failure.actions:
                parse_hermes(action)  # the real CLI parser
                words = action.split()
                assert words[:5] == ["hermes", "--home", "/h", "--store-url", shown]
                assert "recover" not in words and "repair" not in words
            if spooled is None:  # only a failure that spooled names the import
                assert not any("import-spool" in a for a in failure.actions)
            elif cause in (Cause.DISK_FULL, Cause.READONLY, Cause.IO_ERROR):
                assert any("import-spool" in a for a in failure.actions)
