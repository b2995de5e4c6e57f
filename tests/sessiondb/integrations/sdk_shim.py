"""A pytest plugin for running the Agents SDK's own session tests against
`HermesSession`: the name ``SQLiteSession`` those tests import is
`HermesSession` (a subclass that takes ``SQLiteSession``'s arguments), and
every test gets its own ``HERMES_HOME``, so a session made without a path
(``SQLiteSession("id")``, in memory for the SDK) is a fresh store too.

Loaded with ``-p sdk_shim`` by tests/sessiondb/integrations/test_agents_sdk_suite.py
in a pytest run over the SDK's test files; not a test module itself.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import agents
import agents.memory
import pytest

from sessiondb.integrations.openai_agents import HermesSession


class SQLiteSession(HermesSession):
    """`HermesSession` under the SDK's name, taking ``SQLiteSession``'s
    arguments: the database path (``:memory:``: the test's own home), the
    table names (unused: the store has its own schema) and the settings."""

    def __init__(self, session_id: str, db_path: str | os.PathLike[str] = ":memory:",
                 sessions_table: str = "agent_sessions", messages_table: str = "agent_messages",
                 session_settings: Any = None) -> None:
        path = None if str(db_path) == ":memory:" else db_path
        super().__init__(session_id, path, session_settings=session_settings)


agents.SQLiteSession = SQLiteSession  # type: ignore[misc]
agents.memory.SQLiteSession = SQLiteSession  # type: ignore[misc]


@pytest.fixture(autouse=True)
def _hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))
    monkeypatch.delenv("HERMES_STORE_URL", raising=False)
