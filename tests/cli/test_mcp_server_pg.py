"""`hermes mcp serve --store-url postgresql://...`: the same tools on the PostgreSQL
backend (and, for comparison, on SQLite), through the MCP SDK's stdio client."""
from __future__ import annotations

import os

import pytest
from mcp import ClientSession

from sessiondb.importers import import_logs
from tests.cli.test_mcp_server import ask, serve_with
from tests.helpers import agent_logs as a

pytestmark = pytest.mark.both_backends


def test_search_list_read_and_stats(open_store, hermes_home, tmp_path, backend):
    a.codex_rollout(tmp_path / "codex")
    db = open_store()
    import_logs(db, "codex", [tmp_path / "codex"])
    url = os.environ.get("HERMES_STORE_URL") if backend == "postgres" else None
    sid = f"codex-{a.CODEX_ID}"

    async def body(s: ClientSession) -> list:
        return [await ask(s, "search_sessions", {"query": "exchange rate"}),
                await ask(s, "list_sessions", {}),
                await ask(s, "read_session", {"session_id": sid, "limit": 3}),
                await ask(s, "session_stats", {}),
                await ask(s, "read_session", {"session_id": "missing"})]

    found, listed, read, stats, missing = serve_with(hermes_home, body, store_url=url)
    assert [h["session_id"] for h in found[1]["hits"]] == [sid]
    assert [s["id"] for s in listed[1]["sessions"]] == [sid]
    assert [m["role"] for m in read[1]["messages"]] == ["assistant", "assistant", "assistant"]
    assert read[1]["page"]["total"] == 10
    assert (stats[1]["sessions"], stats[1]["messages"]) == (1, 10)
    assert missing == (True, "no session 'missing'")
