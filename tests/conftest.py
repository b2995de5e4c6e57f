"""Shared fixtures: every test gets its own HERMES_HOME and closed stores."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import pytest

from sessiondb import SessionDB, StoreFace
from tests.helpers import pgserver
from tests.helpers.litestream_run import WalRun, litestream_binary

WAL_RUN = pytest.StashKey[WalRun]()


@pytest.fixture(autouse=True)
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("HERMES_STORE_URL", raising=False)  # tests choose their backend
    return home


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_backends: the module's store tests run on SQLite "
                            "and on PostgreSQL (the `backend` fixture)")
    config.addinivalue_line("markers", "litestream_run: asserts on the minute of appends "
                            "beside Litestream that runs in the background of the session "
                            "(the `litestream_wal_run` fixture); such a test runs last")
    config.addinivalue_line("markers", "sqlite_only(reason): in a both_backends module, a test "
                            "about the SQLite file itself (pages, WAL, files, carving, recovery)")


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: start only for a selected test
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked litestream_run go last, and the background run they assert
    on starts now, so the rest of the session runs beside it."""
    late = [i for i in items if i.get_closest_marker("litestream_run") is not None]
    if not late:
        return
    items[:] = [i for i in items if i not in late] + late
    if not config.option.collectonly and os.access(litestream_binary(), os.X_OK):
        config.stash[WAL_RUN] = WalRun().start()


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(WAL_RUN, None)
    if run is not None:
        run.close()


@pytest.fixture(scope="session")
def litestream_wal_run(pytestconfig: pytest.Config) -> WalRun:
    """The background run started after collection (see above)."""
    run = pytestconfig.stash.get(WAL_RUN, None)
    if run is None:  # not started at collection (e.g. the binary appeared since)
        run = pytestconfig.stash[WAL_RUN] = WalRun().start()
    return run


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`backend` is "sqlite" everywhere; in modules marked both_backends it is
    also "postgres", except for tests marked sqlite_only."""
    if "backend" not in metafunc.fixturenames:
        return
    both = metafunc.definition.get_closest_marker("both_backends") is not None
    only = metafunc.definition.get_closest_marker("sqlite_only") is not None
    params = ["sqlite", "postgres"] if both and not only else ["sqlite"]
    metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """Which store the `open_store` fixture opens: "sqlite" or "postgres"."""
    return getattr(request, "param", "sqlite")


@pytest.fixture
def open_store(hermes_home: Path, backend: str, request: pytest.FixtureRequest,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., StoreFace]]:
    """Open stores (default: the home's) and close all of them afterwards.

    On the postgres backend each distinct ``path`` (None: the home's store)
    (or home and profile) is a fresh database of the run's server, so handles
    opened on one path share one store as they share one file on SQLite.
    The home's store is also ``$HERMES_STORE_URL``: the CLI and
    `SessionDB.open()` in the test body reach the same database."""
    opened: list[StoreFace] = []
    urls: dict[tuple[str, ...], str] = {}
    databases = request.getfixturevalue("pg_databases") if backend == "postgres" else None
    if databases is not None:
        home_key = ("None", "None", "None")
        urls[home_key] = databases.create()
        monkeypatch.setenv("HERMES_STORE_URL", urls[home_key])

    def _open(path: os.PathLike[str] | str | None = None, **kw) -> StoreFace:
        if databases is not None:
            key = (str(path), str(kw.get("home")), str(kw.get("profile")))
            if key not in urls:
                urls[key] = databases.create()
            db = SessionDB.open(url=urls[key], **kw)
        else:
            db = SessionDB(path, **kw) if path is not None else SessionDB.open(**kw)
        opened.append(db)
        return db

    yield _open
    for db in opened:
        db.close()
    for url in urls.values():
        databases.drop(url)  # type: ignore[union-attr]


@pytest.fixture
def db(open_store: Callable[..., StoreFace]) -> StoreFace:
    return open_store()


@pytest.fixture
def sid(db: StoreFace) -> str:
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
