"""`hermes mcp serve` driven by the MCP SDK's own client over stdio.

One server process per test (spawned with the SDK's `stdio_client`), many
calls each: the tools are listed read-only, search finds imported text,
read_session pages and opens a hit in place, answers are bounded, every
tool refuses bad arguments with a tool error (no path is ever taken from
the client), and a foreign store or a damaged index gives an answer, not a
crash. (The PostgreSQL backend: test_mcp_server_pg.py.)
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from sessiondb import SessionDB
from sessiondb.importers import import_logs
from tests.helpers import agent_logs as a
from tests.helpers.foreign_dbs import build_llm
from tests.helpers.search_damage import junk_fts_blocks

ROOT = Path(__file__).resolve().parents[2]
SERVE = "import sys; from hstate_cli.main import cli; cli(sys.argv[1:], prog_name='hermes')"
LONG = "long-session"


def serve_with(home: Path, body: Callable[[ClientSession], Awaitable[Any]],
               *options: str, store_url: str | None = None) -> Any:
    """Run ``body`` against `hermes --home HOME mcp serve OPTIONS` in a subprocess."""
    url = ["--store-url", store_url] if store_url else []
    params = StdioServerParameters(command=sys.executable,
                                   args=["-c", SERVE, "--home", str(home), *url, "mcp",
                                         "serve", *options], cwd=str(ROOT))

    async def main() -> Any:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)
    return anyio.run(main)


async def ask(session: ClientSession, tool: str, args: dict[str, Any]) -> tuple[bool, Any]:
    res = await session.call_tool(tool, args)
    text = res.content[0].text
    return res.is_error, (text if res.is_error else json.loads(text))


@pytest.fixture
def filled(tmp_path: Path, hermes_home: Path) -> Path:
    project = tmp_path / "claude" / "-home-dev-shop"
    a.claude_v1(project)
    a.claude_v2(project)
    with SessionDB.open(hermes_home) as db:
        import_logs(db, "claude-code", [project])
        db.create_session(LONG, source="agent", title="A long one")
        db.append_messages(LONG, [{"role": "user" if i % 2 else "assistant",
                                   "content": f"step {i} " + "padding words " * 80}
                                  for i in range(300)])
        db.create_session("wide", source="agent", title="One long tool output")
        db.append_message("wide", {"role": "tool", "tool_call_id": "c1",
                                   "content": "0123456789" * 500})
    return hermes_home


def test_tools_search_read_pages_and_bounds(filled):
    async def body(s: ClientSession) -> dict:
        out: dict[str, Any] = {"tools": (await s.list_tools()).tools}
        for name, args in (("search", {"query": "payment mock"}),
                           ("list", {"limit": 2}),
                           ("newest", {"session_id": LONG, "limit": 5}),
                           ("before", {"session_id": LONG, "limit": 5, "before_position": 296}),
                           ("big", {"session_id": LONG, "limit": 100}),
                           ("wide", {"session_id": "wide"}),
                           ("stats", {})):
            tool = {"search": "search_sessions", "list": "list_sessions",
                    "stats": "session_stats"}.get(name, "read_session")
            out[name] = await ask(s, tool, args)
        hit = out["search"][1]["hits"][0]
        out["around"] = await ask(s, "read_session", {"session_id": hit["session_id"],
                                                      "around_message_id": hit["message_id"],
                                                      "context": 1})
        return out

    out = serve_with(filled, body, "--max-bytes", "8192")
    assert [t.name for t in out["tools"]] == ["search_sessions", "list_sessions",
                                              "read_session", "session_stats"]
    assert all(t.annotations.read_only_hint for t in out["tools"])
    assert all(t.input_schema["additionalProperties"] is False for t in out["tools"])
    failed, found = out["search"]
    assert not failed and found["index_stale"] is False
    [hit] = found["hits"]
    assert hit["session_id"] == f"claude-code-{a.SESSION_2}" and "**payment**" in hit["snippet"]
    around = out["around"][1]
    assert [m["id"] for m in around["messages"]][1] == hit["message_id"]
    assert around["session"]["title"] == "Fixing the flaky checkout test"
    listed = out["list"][1]
    assert len(listed["sessions"]) == 2 and "before" in listed["next_page"]
    newest = out["newest"][1]
    assert [m["position"] for m in newest["messages"]] == [296, 297, 298, 299, 300]
    assert newest["page"] == {"total": 300, "more_before": True, "more_after": False}
    assert [m["position"] for m in out["before"][1]["messages"]] == [291, 292, 293, 294, 295]
    big = out["big"][1]  # 100 messages of ~1 KB do not fit in 8 KB: cut, and said so
    assert big["truncated"] is True and big["omitted"] + len(big["messages"]) == 100
    assert len(json.dumps(big).encode()) <= 8192
    assert big["next_page"]["after_position"] == big["messages"][-1]["position"]
    [wide] = out["wide"][1]["messages"]
    assert wide["text_truncated"] is True and len(wide["text"]) == 2001
    assert wide["tool_call_id"] == "c1"
    stats = out["stats"][1]
    assert (stats["sessions"], stats["messages"]) == (6, 316)


BAD = [
    ("search_sessions", {}, "argument 'query' is required"),
    ("search_sessions", {"query": "   "}, "the query is empty; give a word or a \"quoted phrase\""),
    ("search_sessions", {"query": "x", "limit": 51}, "argument 'limit' must be an integer from 1 to 50"),
    ("search_sessions", {"query": "x", "since": "yesterday"},
     "argument 'since': 'yesterday' is not a date: use 2026-01-31, 2026-01-31T14:00 or an age such as 7d"),
    ("search_sessions", {"query": "x", "role": "root"},
     "argument 'role' must be one of system, developer, user, assistant, tool"),
    ("list_sessions", {"limit": "ten"}, "argument 'limit' must be an integer from 1 to 200"),
    ("list_sessions", {"path": "/etc/passwd"},
     "unknown argument 'path'; this tool takes: limit, source, since, before"),
    ("read_session", {"session_id": "../../etc/passwd"},
     "invalid session id '../../etc/passwd': 1-128 characters from letters, digits and . _ : @ "
     "+ = -, starting with a letter or digit, without '..'"),
    ("read_session", {"session_id": "/etc/passwd"},
     "invalid session id '/etc/passwd': 1-128 characters from letters, digits and . _ : @ "
     "+ = -, starting with a letter or digit, without '..'"),
    ("read_session", {"session_id": "nope"}, "no session 'nope'"),
    ("read_session", {"session_id": LONG, "around_message_id": 3, "after_position": 1},
     "give around_message_id, or before_position/after_position, not both"),
    ("read_session", {"session_id": LONG, "context": True},
     "argument 'context' must be an integer from 0 to 20"),
    ("session_stats", {"store": "/tmp/other.db"},
     "unknown argument 'store'; this tool takes: no arguments"),
    ("drop_sessions", {}, "no tool 'drop_sessions'; the tools are search_sessions, "
                          "list_sessions, read_session, session_stats"),
]


def test_the_cli_and_the_tools_load_without_the_sdk():
    """`hermes` starts without importing the MCP SDK; only `mcp serve` does."""
    code = ("import sys, hstate_cli.main, hstate_cli.mcp_tools; "
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


def test_every_tool_refuses_bad_arguments_with_a_tool_error(filled):
    async def body(s: ClientSession) -> list:
        answers = [await ask(s, tool, args) for tool, args, _ in BAD]
        answers.append(await ask(s, "session_stats", {}))  # still serving
        return answers

    answers = serve_with(filled, body)
    assert [(failed, text) for failed, text in answers[:-1]] == [(True, e) for *_, e in BAD]
    assert answers[-1][0] is False


def test_foreign_store_and_missing_store_are_tool_errors(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    build_llm(foreign / "state.db", conversations=2)  # llm's logs.db where our store would be

    async def body(s: ClientSession) -> list:
        return [await ask(s, "session_stats", {}), await ask(s, "search_sessions",
                                                              {"query": "x"})]

    answers = serve_with(foreign, body)
    assert all(failed for failed, _ in answers)
    assert "llm" in answers[0][1] and "not a hermes-state store" in answers[0][1], answers[0][1]
    missing = tmp_path / "nothing-here"
    [(failed, text)] = serve_with(missing, lambda s: _one(s, "list_sessions", {}))
    assert failed and text.startswith("no store at")
    assert not missing.exists()  # nothing created


async def _one(s: ClientSession, tool: str, args: dict) -> list:
    return [await ask(s, tool, args)]


def test_a_damaged_index_still_answers(filled):
    assert junk_fts_blocks(filled / "state.db", leaves_only=True) > 0

    async def body(s: ClientSession) -> list:
        return [await ask(s, "search_sessions", {"query": "payment"}),
                await ask(s, "search_sessions", {"query": "invoice"})]

    answers = serve_with(filled, body)
    assert [failed for failed, _ in answers] == [False, False]
    assert [h["session_id"] for h in answers[0][1]["hits"]] == [f"claude-code-{a.SESSION_2}"]
    assert answers[1][1]["hits"]
