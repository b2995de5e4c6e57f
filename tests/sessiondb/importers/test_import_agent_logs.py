"""`sessions import --from claude-code|codex`: the transcripts those tools leave on disk.

Fixtures are in the tools' published line shapes for several client
versions (tests/helpers/agent_logs.py). Checked: sessions, titles, lineage,
messages in order with roles, tool calls and results, reasoning, usage,
context; bad lines named and skipped with the rest imported; unknown line
types counted; idempotence; dry run; the sources only read; the imported
text searchable (on both backends).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb.importers import import_logs
from tests.helpers import agent_logs as a

pytestmark = pytest.mark.both_backends

CC_MAIN = f"claude-code-{a.SESSION}"
CC_V1 = f"claude-code-{a.SESSION_2}"
CODEX = f"codex-{a.CODEX_ID}"


@pytest.fixture
def claude_dir(tmp_path: Path) -> Path:
    project = tmp_path / "claude" / "projects" / "-home-dev-shop"
    a.claude_v1(project)
    a.claude_v2(project)
    return tmp_path / "claude" / "projects"


@pytest.fixture
def codex_dir(tmp_path: Path) -> Path:
    root = tmp_path / "codex" / "sessions"
    a.codex_legacy(root)
    a.codex_rollout(root)
    return root


def _messages(db, sid: str) -> list[dict]:
    return [m.message for m in db.message_page(sid, limit=100)]


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_claude_code_sessions_messages_lineage_and_usage(open_store, claude_dir):
    before = _snapshot(claude_dir)
    db = open_store()
    report = import_logs(db, "claude-code", [claude_dir])
    assert _snapshot(claude_dir) == before  # only read
    main = db.get_session(CC_MAIN)
    assert (main.source, main.title, main.model) == (
        "claude-code", "Rename the invoice module to billing", "claude-sonnet-4-5-20250929")
    # the response split over two lines (msg_A) is counted once
    assert (main.input_tokens, main.output_tokens, main.cache_read_tokens) == (20, 40, 2000)
    roles = [(m["role"], m.get("content"), bool(m.get("tool_calls"))) for m in _messages(db, CC_MAIN)]
    assert roles == [
        ("user", "Rename the invoice module to billing", False),
        ("assistant", "I'll delegate the search to a subagent.", False),
        ("assistant", None, True),
        ("tool", "invoice is imported in 4 files", False),
        ("user", "Summary of the earlier conversation", False),
        ("assistant", None, True),
        ("tool", "fatal: not under version control", False)]
    bash = _messages(db, CC_MAIN)[5]["tool_calls"][0]
    assert bash["function"] == {"name": "Bash",
                                "arguments": json.dumps({"command": "git mv invoice billing"})}
    assert _messages(db, CC_MAIN)[6]["is_error"] is True
    assert _messages(db, CC_MAIN)[4]["is_compact_summary"] is True
    agent = db.get_session(f"{CC_MAIN}-agent-a91f2c3")
    assert (agent.parent_session_id, agent.title, agent.message_count) == (
        CC_MAIN, "find invoice imports", 2)
    # version 1.0: the summary names the title, the inline sidechain is a child
    old = db.get_session(CC_V1)
    assert old.title == "Fixing the flaky checkout test"
    first_reply = _messages(db, CC_V1)[1]
    assert first_reply["reasoning"] == "Look at the test first."
    assert first_reply["tool_calls"][0]["id"] == "toolu_01"
    side = db.get_session(f"{CC_V1}-sidechain-s1")
    assert (side.parent_session_id, side.message_count) == (CC_V1, 2)
    usage = {(r.model, r.api_calls) for r in db.session_usage(CC_MAIN)}
    assert usage == {("claude-sonnet-4-5-20250929", 2)}
    assert json.loads(db.meta(f"claude-code:session:{CC_MAIN}"))["git_branch"] == "main"
    # the garbage line is named, the rest imported; unknown types counted
    skipped = [(Path(s["path"]).name, s["line"]) for f in report.files for s in f.lines.skipped]
    assert skipped == [(f"{a.SESSION}.jsonl", 7)]
    assert report.files[1].lines.unknown_types == {"x-future-line": 1}
    assert report.files[1].lines.not_messages["file-history-snapshot"] == 1
    hits = db.search("payment mock")
    assert [h.session_id for h in hits] == [CC_V1]


def test_codex_rollouts_of_both_layouts(open_store, codex_dir):
    db = open_store()
    report = import_logs(db, "codex", [codex_dir])
    s = db.get_session(CODEX)
    assert (s.title, s.model) == ("why is the exchange rate cache stale?", "gpt-5-codex")
    assert (s.input_tokens, s.cache_read_tokens, s.output_tokens) == (2000, 3000, 400)
    msgs = _messages(db, CODEX)
    kinds = [(m["role"], (m.get("tool_calls") or [{}])[0].get("function", {}).get("name"))
             for m in msgs]
    assert kinds == [("user", None), ("user", None), ("assistant", None), ("assistant", "shell"),
                     ("tool", None), ("assistant", "apply_patch"), ("tool", None),
                     ("assistant", "local_shell"), ("assistant", "web_search"),
                     ("assistant", None)]
    assert msgs[2]["reasoning"] == "**Checking the cache TTL**"
    assert msgs[4] == {"role": "tool", "content": "cache.py:12: TTL = 86400",
                       "tool_call_id": "call_A"}
    [row] = db.session_usage(CODEX)
    assert (row.model, row.provider, row.reasoning_tokens) == ("gpt-5-codex", "openai", 128)
    meta = json.loads(db.meta(f"codex:session:{CODEX}"))
    assert (meta["git_branch"], meta["version"]) == ("feature/rates", "0.46.0")
    legacy = db.get_session("codex-7c1d0e2a-0000-4000-8000-000000000001")
    assert legacy.title == "list the failing migrations"
    assert _messages(db, legacy.id)[2]["content"] == "m001_init.py\nm002_users.py"
    rollout = next(f for f in report.files if CODEX_FILE_ID in f.result.path)
    assert rollout.lines.unknown_types == {"response_item:ghost_snapshot": 1}
    assert [s["line"] for s in rollout.lines.skipped] == [19]
    assert [h.session_id for h in db.search("exchange rate")] == [CODEX]


CODEX_FILE_ID = a.CODEX_ID


def test_second_import_adds_nothing_and_dry_run_writes_nothing(open_store, claude_dir,
                                                                codex_dir):
    db = open_store()
    dry = import_logs(db, "claude-code", [claude_dir], dry_run=True)
    assert dry.totals()["messages_added"] == 15 and db.count_messages() == 0
    first = import_logs(db, "claude-code", [claude_dir]).totals()
    again = import_logs(db, "claude-code", [claude_dir]).totals()
    assert (first["messages_added"], again["messages_added"], again["usage_rows_added"]) == (15, 0, 0)
    assert again["sessions_existing"] == first["sessions_created"] == 4
    import_logs(db, "codex", [codex_dir])
    assert import_logs(db, "codex", [codex_dir]).totals()["messages_added"] == 0


def test_subagent_file_imported_first_is_linked_when_its_conversation_arrives(open_store,
                                                                                tmp_path):
    main, agent = a.claude_v2(tmp_path / "p")
    db = open_store()
    import_logs(db, "claude-code", [agent])
    assert db.get_session(f"{CC_MAIN}-agent-a91f2c3").parent_session_id is None
    import_logs(db, "claude-code", [main])
    assert db.get_session(f"{CC_MAIN}-agent-a91f2c3").parent_session_id == CC_MAIN


def test_a_message_the_store_refuses_is_named_and_the_rest_imported(open_store, tmp_path):
    path = a.write_lines(tmp_path / f"{a.SESSION}.jsonl", [
        a.cc_user("a1", None, "2026-01-20T11:57:18.000Z", "first"),
        a.cc_user("a2", "a1", "2026-01-20T11:57:19.000Z", "bad \ud800 surrogate"),
        a.cc_user("a3", "a2", "2026-01-20T11:57:20.000Z", "third")])
    db = open_store()
    report = import_logs(db, "claude-code", [path])
    [skip] = report.files[0].lines.skipped
    assert skip["line"] == 2 and skip["why"].startswith("the store refused its message")
    assert [m["content"] for m in _messages(db, CC_MAIN)] == ["first", "third"]


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_cli_json_counts_per_file_and_exit_1_when_a_line_was_skipped(open_store, claude_dir,
                                                                     tmp_path):
    open_store().close()
    res = run("sessions", "import", "--from", "claude-code", str(claude_dir), "--json")
    assert res.exit_code == 1
    assert res.stderr.strip().splitlines()[-1] == (
        "Error: 1 line could not be imported and was skipped; the rest was imported")
    doc = json.loads(res.stdout)
    assert doc["totals"]["files"] == 3 and doc["totals"]["skipped_lines"] == 1
    assert [f["messages_added"] for f in doc["files"]] == [6, 7, 2]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    clean = run("sessions", "import", "--from", "codex", str(empty))
    assert clean.exit_code == 0, clean.output
    assert "1 file, 0 lines read." in clean.stdout
    none = run("sessions", "import", "--from", "codex", str(tmp_path / "claude"))
    assert none.exit_code == 1
    assert "Error: no codex transcripts under" in none.stderr
    one = run("sessions", "import", str(claude_dir))
    assert one.exit_code == 2 and "Error: --from hermes imports one file" in one.stderr


def test_codex_tool_outputs_as_content_items(open_store, tmp_path):
    """A later rollout: outputs as lists of text and image items, reasoning as
    readable content, an answer in two parts; images are named, never stored."""
    root = tmp_path / "codex"
    a.codex_content_items(root)
    db = open_store()
    report = import_logs(db, "codex", [root])
    sid = f"codex-{a.CODEX_ITEMS_ID}"
    msgs = _messages(db, sid)
    assert report.skipped_lines == 0 and db.get_session(sid).model == "gpt-5.2-codex"
    assert [m["role"] for m in msgs] == ["user", "assistant", "assistant", "tool", "tool",
                                         "assistant"]
    assert msgs[1]["reasoning"] == "Take a screenshot at a narrow width."
    assert msgs[2]["tool_calls"][0]["function"]["name"] == "view_image"
    assert (msgs[3]["content"], msgs[3]["tool_call_id"]) == ("shot.png 390x844", "call_V")
    assert msgs[3]["attachments"] == [{"type": "input_image"}]
    assert (msgs[4]["content"], msgs[4]["attachments"]) == ("", [{"type": "input_image"}])
    assert "iVBOR" not in json.dumps(msgs)
    assert msgs[5]["content"] == "The button renders,\nbut it overlaps the footer."


@pytest.mark.parametrize("raw", [
    b'{"type": "x", "n": [1, 2.5, null]}\n', b'{"type":"x"}', b'{"type":"x"}\r\n',
    b'{"type":"x"} \t\n', b'  {"type":"x"}\n', b'{"type":"x"}{"type":"y"}\n',
    b'{"type":"x"}\n\n', b'{"type": "x",\n', b'{"type": NaN}\n', b'\xef\xbb\xbf{"type":"x"}\n',
    b'{"a": "\\ud800"}\n', b'[{"type": "x"}]\n', b'{"type": "x"} x\n'])
def test_a_line_reads_as_the_json_decoder_reads_it(raw):
    from io import BytesIO

    from sessiondb.importers.log_lines import LineReport, read_lines
    report = LineReport("f")
    got = [line.obj for line in read_lines(BytesIO(raw), report)]
    try:
        want = json.JSONDecoder().decode(raw.decode("utf-8"))
    except ValueError as e:
        assert got == [] and report.skipped[0]["why"].endswith(f"({e.msg})")
        return
    assert (got, report.skipped) == (([want], []) if isinstance(want, dict) else
                                     ([], [{"path": "f", "line": 1, "why": "not a JSON object"
                                                                          " (a list)"}]))
