"""`hermes mcp serve` opens the store read-only: after a whole MCP session
(search, list, read, stats) over the SDK's stdio client, the store, its
sidecars and the rest of the home are byte for byte what they were, on a
store at an older schema version, one with a stale index, one with a
damaged index and a quarantined one; and the answers are right."""
from __future__ import annotations

import apsw
import pytest
from mcp import ClientSession

from hstate_cli import mcp_tools
from hstate_cli.context import AppContext
from sessiondb import SessionDB
from sessiondb.engine import record_damage
from sessiondb.index import search_index
from tests.cli.test_mcp_server import ask, serve_with
from tests.helpers.search_damage import junk_fts_blocks
from tests.sessiondb.rows.test_row_format import legacy_store
from tests.sessiondb.store.test_read_only import files


def _older(path):  # as m012 left it: m013's tables not there yet
    conn = apsw.Connection(str(path))
    for table in ("graph_writes", "graph_blobs", "graph_checkpoints"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("DELETE FROM migrations WHERE name = 'm013_graph_checkpoints'")
    conn.close()


def _stale(path):
    with SessionDB(path) as db, db.atomic() as conn:
        search_index.mark_stale(conn, "marked in a test", None)


def _damaged(path):
    assert junk_fts_blocks(path, leaves_only=True) > 0


def _quarantined(path):
    db = SessionDB(path)  # a writer killed with its -wal and -shm left behind
    db.core.writer.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    db.append_message("s2", {"role": "user", "content": "written last, still in the wal"})
    db.close()
    record_damage(path, "found damaged in a test", "doctor")


async def _session(s: ClientSession) -> list:
    return [await ask(s, "search_sessions", {"query": "lantern", "limit": 50}),
            await ask(s, "list_sessions", {}),
            await ask(s, "read_session", {"session_id": "s1", "limit": 5}),
            await ask(s, "session_stats", {})]


@pytest.mark.parametrize("make, stale, messages", [
    (_older, False, 31), (_stale, True, 31), (_damaged, None, 31), (_quarantined, False, 32)],
    ids=["older_schema", "stale_index", "damaged_index", "quarantined"])
def test_a_whole_session_changes_no_byte(hermes_home, make, stale, messages):
    with SessionDB.open(hermes_home) as db:
        db.create_session("s1", source="test", title="first")
        db.append_messages("s1", [{"role": "user", "content": f"harbour lantern {i}"}
                                  for i in range(30)])
        db.create_session("s2", source="other", title="second")
        db.append_message("s2", {"role": "user", "content": "quiet meadow"})
    make(hermes_home / "state.db")
    before = files(hermes_home)
    found, listed, read, stats = serve_with(hermes_home, _session)
    assert files(hermes_home) == before
    assert not any(failed for failed, _ in (found, listed, read, stats)), (found, listed)
    hits = found[1]["hits"]
    assert len(hits) == 30 and {h["session_id"] for h in hits} == {"s1"}
    if stale is not None:
        assert found[1]["index_stale"] is stale
    assert [s["id"] for s in listed[1]["sessions"]] == ["s2", "s1"]
    assert [m["position"] for m in read[1]["messages"]] == [26, 27, 28, 29, 30]
    assert (stats[1]["sessions"], stats[1]["messages"]) == (2, messages)


def test_a_schema_too_old_to_read_is_a_tool_error_naming_the_upgrade(hermes_home):
    hermes_home.mkdir(mode=0o700)
    legacy_store(hermes_home / "state.db")
    before = files(hermes_home)
    with pytest.raises(mcp_tools.ToolError) as caught:
        mcp_tools.call(AppContext(hermes_home, None), "search_sessions", {"query": "old"})
    text = str(caught.value)
    assert "older hermes-state" in text and "hermes --home" in text and "sessions repair" in text
    assert files(hermes_home) == before
