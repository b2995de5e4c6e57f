"""Shared fixtures: every test gets its own HERMES_HOME and closed stores."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import pytest

from sessiondb import SessionDB
from tests.helpers import pgserver


@pytest.fixture(autouse=True)
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture
def open_store(hermes_home: Path) -> Iterator[Callable[..., SessionDB]]:
    """Open stores (default: the home's) and close all of them afterwards."""
    opened: list[SessionDB] = []

    def _open(path: os.PathLike[str] | str | None = None, **kw) -> SessionDB:
        db = SessionDB(path, **kw) if path is not None else SessionDB.open(**kw)
        opened.append(db)
        return db

    yield _open
    for db in opened:
        db.close()


@pytest.fixture
def db(open_store: Callable[..., SessionDB]) -> SessionDB:
    return open_store()


@pytest.fixture
def sid(db: SessionDB) -> str:
    return db.create_session("s1", source="test", model="m")


# -- PostgreSQL: one throwaway server per test run, a fresh database per test --

@pytest.fixture(scope="session")
def pg_server() -> Iterator["pgserver.PgServer"]:
    """The run's server; skipped (failed on CI) when the machine cannot run one."""
    reason = pgserver.missing_driver()
    server = None
    if reason is None:
        try:
            server = pgserver.PgServer().start()
        except pgserver.Unavailable as e:
            reason = str(e)
    if server is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL tests: {reason}")
        pytest.skip(reason)
    yield server
    server.destroy()


@pytest.fixture(scope="session")
def pg_databases(pg_server: "pgserver.PgServer") -> "pgserver.Databases":
    return pgserver.Databases(pg_server)


@pytest.fixture(scope="session")
def pg_url(pg_server: "pgserver.PgServer") -> str:
    """The server's maintenance database (``postgres``)."""
    return pg_server.url()


@pytest.fixture
def pg_db_url(pg_databases: "pgserver.Databases") -> Iterator[str]:
    """A fresh database holding the current schema, dropped afterwards."""
    url = pg_databases.create()
    yield url
    pg_databases.drop(url)
