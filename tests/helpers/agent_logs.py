"""Transcripts in the shapes Claude Code and Codex CLI write, for the importers' tests.

Built from the tools' published line shapes (field names as the clients
write them) for several client versions: Claude Code 1.0 (inline
sidechains, summary lines), 2.0 (file-history snapshots, ``agent-<id>.jsonl``
beside the conversation), 2.1 (queue operations, progress lines, subagents
under ``<session>/subagents/``, one API response split over several lines);
Codex before the rollout envelope (a bare meta line, bare items,
``record_type: state``), 0.46 (``session_meta``/``response_item``/``event_msg``
/``turn_context``) and later (custom and shell tool calls, ``compacted``;
tool outputs as lists of text and image items, reasoning as ``content``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SESSION = "5f2a7c1e-0b6d-4c1a-9e3f-2b8d4a6c0e11"
SESSION_2 = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
CODEX_ID = "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5"


def write_lines(path: Path, lines: list[Any]) -> Path:
    """Objects as JSON lines; a str is written as it is (a garbage line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def _base(uuid: str, parent: str | None, ts: str, session: str, version: str,
          **extra: Any) -> dict[str, Any]:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external",
            "cwd": "/home/dev/shop", "sessionId": session, "version": version,
            "gitBranch": "main", "uuid": uuid, "timestamp": ts, **extra}


def cc_user(uuid: str, parent: str | None, ts: str, content: Any, *, session: str = SESSION,
            version: str = "2.1.12", **extra: Any) -> dict[str, Any]:
    return {**_base(uuid, parent, ts, session, version, **extra), "type": "user",
            "message": {"role": "user", "content": content}}


def cc_assistant(uuid: str, parent: str | None, ts: str, blocks: list[dict[str, Any]], *,
                 msg_id: str, session: str = SESSION, version: str = "2.1.12",
                 model: str = "claude-sonnet-4-5-20250929", usage: dict | None = None,
                 **extra: Any) -> dict[str, Any]:
    usage = usage or {"input_tokens": 10, "cache_creation_input_tokens": 100,
                      "cache_read_input_tokens": 1000, "output_tokens": 20,
                      "service_tier": "standard"}
    return {**_base(uuid, parent, ts, session, version, **extra), "type": "assistant",
            "requestId": f"req_{msg_id}",
            "message": {"model": model, "id": msg_id, "type": "message", "role": "assistant",
                        "content": blocks, "stop_reason": None, "stop_sequence": None,
                        "usage": usage}}


def tool_use(tid: str, name: str, inp: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": inp}


def tool_result(tid: str, content: Any, is_error: bool = False) -> dict[str, Any]:
    block = {"tool_use_id": tid, "type": "tool_result", "content": content}
    if is_error:
        block["is_error"] = True
    return block


def claude_v1(project: Path) -> Path:
    """Claude Code 1.0: a summary line first, an inline sidechain (no agentId)."""
    v = "1.0.58"
    return write_lines(project / f"{SESSION_2}.jsonl", [
        {"type": "summary", "summary": "Fixing the flaky checkout test", "leafUuid": "u4"},
        cc_user("u1", None, "2025-07-01T09:00:00.000Z", "the checkout test fails on CI, why?",
                session=SESSION_2, version=v),
        cc_assistant("u2", "u1", "2025-07-01T09:00:05.000Z",
                     [{"type": "thinking", "thinking": "Look at the test first.",
                       "signature": "sig"},
                      {"type": "text", "text": "Let me read the test."},
                      tool_use("toolu_01", "Read", {"file_path": "/home/dev/shop/t.py"})],
                     msg_id="msg_01", session=SESSION_2, version=v),
        cc_user("u3", "u2", "2025-07-01T09:00:06.000Z",
                [tool_result("toolu_01", "     1→def test_checkout(): sleep(0.1)")],
                session=SESSION_2, version=v,
                toolUseResult={"type": "text", "file": {"filePath": "/home/dev/shop/t.py"}}),
        cc_user("s1", "u3", "2025-07-01T09:00:07.000Z", "Search the code for sleep calls",
                session=SESSION_2, version=v, isSidechain=True),
        cc_assistant("s2", "s1", "2025-07-01T09:00:08.000Z",
                     [{"type": "text", "text": "Found three sleep calls in fixtures."}],
                     msg_id="msg_s2", session=SESSION_2, version=v, isSidechain=True),
        cc_assistant("u4", "u3", "2025-07-01T09:00:09.000Z",
                     [{"type": "text", "text": "The test sleeps; a race with the "
                       "payment mock explains the flakiness."}],
                     msg_id="msg_02", session=SESSION_2, version=v),
    ])


def claude_v2(project: Path) -> list[Path]:
    """Claude Code 2.0/2.1: snapshots, queue operations, progress, a split
    response, a compact boundary, a garbage line, and a subagent file."""
    main = write_lines(project / f"{SESSION}.jsonl", [
        {"type": "queue-operation", "operation": "dequeue",
         "timestamp": "2026-01-20T11:57:17.716Z", "sessionId": SESSION},
        {"type": "file-history-snapshot", "messageId": "a1",
         "snapshot": {"messageId": "a1", "trackedFileBackups": {}, "timestamp":
                      "2026-01-20T11:57:17.720Z"}, "isSnapshotUpdate": False},
        cc_user("a1", None, "2026-01-20T11:57:18.000Z",
                [{"type": "text", "text": "Rename the invoice module to billing"}]),
        cc_assistant("a2", "a1", "2026-01-20T11:57:20.000Z",
                     [{"type": "text", "text": "I'll delegate the search to a subagent."}],
                     msg_id="msg_A"),
        cc_assistant("a3", "a2", "2026-01-20T11:57:20.500Z",
                     [tool_use("toolu_T", "Task", {"prompt": "find invoice imports"})],
                     msg_id="msg_A"),
        {"type": "progress", "data": {"type": "agent_progress"}, "uuid": "p1",
         "timestamp": "2026-01-20T11:57:21.000Z", "sessionId": SESSION},
        "{this line is not json",
        cc_user("a4", "a3", "2026-01-20T11:57:30.000Z",
                [tool_result("toolu_T", [{"type": "text", "text": "invoice is imported in 4 "
                                           "files"}])]),
        {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted",
         "uuid": "c1", "timestamp": "2026-01-20T11:58:00.000Z", "sessionId": SESSION},
        cc_user("a5", "c1", "2026-01-20T11:58:01.000Z", "Summary of the earlier conversation",
                isCompactSummary=True),
        cc_assistant("a6", "a5", "2026-01-20T11:58:05.000Z",
                     [tool_use("toolu_B", "Bash", {"command": "git mv invoice billing"})],
                     msg_id="msg_B"),
        cc_user("a7", "a6", "2026-01-20T11:58:06.000Z",
                [tool_result("toolu_B", "fatal: not under version control", is_error=True)]),
        {"type": "x-future-line", "uuid": "f1"},
    ])
    agent = write_lines(project / SESSION / "subagents" / "agent-a91f2c3.jsonl", [
        cc_user("b1", None, "2026-01-20T11:57:21.000Z", "find invoice imports",
                isSidechain=True, agentId="a91f2c3"),
        cc_assistant("b2", "b1", "2026-01-20T11:57:25.000Z",
                     [{"type": "text", "text": "invoice is imported in 4 files"}],
                     msg_id="msg_C", model="claude-haiku-4-5-20251001",
                     isSidechain=True, agentId="a91f2c3"),
    ])
    return [main, agent]


def _env(ts: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": ts, "type": kind, "payload": payload}


def codex_legacy(root: Path) -> Path:
    """Codex before the rollout envelope: a bare meta line and bare items."""
    return write_lines(root / "2025" / "05" / "20" / "rollout-2025-05-20T10-00-00-legacy.jsonl", [
        {"id": "7c1d0e2a-0000-4000-8000-000000000001", "timestamp": "2025-05-20T10:00:00.000Z",
         "instructions": None, "git": {"branch": "dev", "commit_hash": "abc123"}},
        {"record_type": "state"},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "list the failing migrations"}]},
        {"type": "function_call", "name": "shell", "call_id": "call_1",
         "arguments": "{\"command\":[\"ls\",\"migrations\"]}"},
        {"type": "function_call_output", "call_id": "call_1",
         "output": {"content": "m001_init.py\nm002_users.py", "metadata": {"exit_code": 0}}},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Two migrations, none failing."}]},
    ])


def codex_rollout(root: Path) -> Path:
    """Codex 0.46 and later: the envelope, token counts, several tool kinds."""
    ts = "2025-10-29T00:59:{:02d}.000Z"
    return write_lines(root / "2025" / "10" / "29" / f"rollout-2025-10-29T00-59-38-{CODEX_ID}.jsonl", [
        _env(ts.format(38), "session_meta", {
            "id": CODEX_ID, "timestamp": ts.format(38), "cwd": "/home/dev/api",
            "originator": "codex_cli_rs", "cli_version": "0.46.0", "instructions": None,
            "source": "cli", "model_provider": "openai",
            "git": {"commit_hash": "f00d", "branch": "feature/rates",
                    "repository_url": "git@example.com:dev/api.git"}}),
        _env(ts.format(38), "response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n  <cwd>/home/dev/api</cwd>"
             "\n</environment_context>"}]}),
        _env(ts.format(39), "response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "why is the exchange rate cache stale?"}]}),
        _env(ts.format(39), "event_msg", {"type": "user_message",
                                          "message": "why is the exchange rate cache stale?"}),
        _env(ts.format(39), "turn_context", {"cwd": "/home/dev/api", "approval_policy":
                                             "on-request", "model": "gpt-5-codex",
                                             "effort": "high", "summary": "auto"}),
        _env(ts.format(40), "response_item", {"type": "reasoning", "summary": [
            {"type": "summary_text", "text": "**Checking the cache TTL**"}],
            "content": None, "encrypted_content": "gAAAA..."}),
        _env(ts.format(40), "response_item", {"type": "reasoning", "summary": [],
                                              "encrypted_content": "gAAAB..."}),
        _env(ts.format(41), "response_item", {"type": "function_call", "name": "shell",
                                              "arguments": "{\"command\":[\"rg\",\"ttl\"]}",
                                              "call_id": "call_A"}),
        _env(ts.format(42), "response_item", {"type": "function_call_output",
                                              "call_id": "call_A",
                                              "output": "cache.py:12: TTL = 86400"}),
        _env(ts.format(43), "response_item", {"type": "custom_tool_call", "status": "completed",
                                              "call_id": "call_P", "name": "apply_patch",
                                              "input": "*** Begin Patch\n*** End Patch"}),
        _env(ts.format(44), "response_item", {"type": "custom_tool_call_output",
                                              "call_id": "call_P", "output": "Done!"}),
        _env(ts.format(45), "response_item", {"type": "local_shell_call", "call_id": "call_L",
                                              "status": "completed", "action": {
                                                  "type": "exec", "command": ["pytest"]}}),
        _env(ts.format(46), "response_item", {"type": "web_search_call", "status": "completed",
                                              "action": {"type": "search",
                                                         "query": "ttl cache"}}),
        _env(ts.format(47), "response_item", {"type": "message", "role": "assistant",
                                              "content": [{"type": "output_text", "text":
                                                           "The TTL is a day; rates change "
                                                           "hourly."}]}),
        _env(ts.format(47), "event_msg", {"type": "token_count", "info": None}),
        _env(ts.format(48), "event_msg", {"type": "token_count", "info": {
            "total_token_usage": {"input_tokens": 5000, "cached_input_tokens": 3000,
                                  "output_tokens": 400, "reasoning_output_tokens": 128,
                                  "total_tokens": 5400},
            "last_token_usage": {"input_tokens": 5000}, "model_context_window": 272000}}),
        _env(ts.format(49), "compacted", {"message": "summary of the turn"}),
        _env(ts.format(50), "response_item", {"type": "ghost_snapshot", "ghost_commit": {}}),
        '["not", "an", "object"]',
    ])


CODEX_ITEMS_ID = "019b3e8b-52d5-7a10-9c2e-b56e73b9ade6"


def codex_content_items(root: Path) -> Path:
    """A later Codex rollout whose tool outputs are lists of content items (the
    Responses API's ``function_call_output`` may carry text and images as
    ``input_text``/``input_image`` items instead of one string), reasoning
    with readable ``content`` (``reasoning_text``) and no summary, and an
    assistant message in two ``output_text`` parts."""
    ts = "2026-02-11T09:30:{:02d}.000Z"
    image = "data:image/png;base64," + "iVBORw0KGgo" * 20
    return write_lines(root / "2026" / "02" / "11" /
                       f"rollout-2026-02-11T09-30-00-{CODEX_ITEMS_ID}.jsonl", [
        _env(ts.format(0), "session_meta", {
            "id": CODEX_ITEMS_ID, "timestamp": ts.format(0), "cwd": "/home/dev/ui",
            "originator": "codex_cli_rs", "cli_version": "0.98.0", "source": "cli",
            "model_provider": "openai"}),
        _env(ts.format(1), "turn_context", {"cwd": "/home/dev/ui", "model": "gpt-5.2-codex"}),
        _env(ts.format(1), "response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "does the login button render on mobile?"}]}),
        _env(ts.format(2), "response_item", {"type": "reasoning", "summary": [], "content": [
            {"type": "reasoning_text", "text": "Take a screenshot at a narrow width."}]}),
        _env(ts.format(3), "response_item", {"type": "function_call", "name": "view_image",
                                             "arguments": "{\"path\":\"shot.png\"}",
                                             "call_id": "call_V"}),
        _env(ts.format(4), "response_item", {"type": "function_call_output", "call_id": "call_V",
                                             "output": [{"type": "input_text",
                                                         "text": "shot.png 390x844"},
                                                        {"type": "input_image",
                                                         "image_url": image}]}),
        _env(ts.format(5), "response_item", {"type": "custom_tool_call_output",
                                             "call_id": "call_W",
                                             "output": [{"type": "input_image",
                                                         "image_url": image}]}),
        _env(ts.format(6), "response_item", {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "The button renders,"},
            {"type": "output_text", "text": "but it overlaps the footer."}]}),
    ])
