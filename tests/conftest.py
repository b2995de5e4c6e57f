"""Shared fixtures: every test gets its own HERMES_HOME and closed stores."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import pytest

from sessiondb import SessionDB


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
