"""A line whose turn failed with "locked ... did not happen" is not sent again,
silently, with the next line: it is withdrawn from the transcript, not
spooled, and the user is told to send it again."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anthropic

from hstate_agent import Agent, Reply, ToolRegistry
from hstate_agent.localmodel.server import LocalModelServer, queue_script
from hstate_cli.commands.chat import report_failure
from sessiondb import strip_markers
from sessiondb.importers.spool_import import spool_dir_for

ROOT = Path(__file__).resolve().parents[2]


def user_texts(request: dict) -> list[str]:
    out = []
    for m in request["messages"]:
        if m["role"] == "user":
            content = m["content"]
            out += [content] if isinstance(content, str) else \
                [b.get("text", "") for b in content if b.get("type") == "text"]
    return out


def test_a_locked_line_is_not_resent_with_the_next(open_store, capsys) -> None:
    db = open_store(patience=0.3)
    db.create_session("s1", source="cli")
    with LocalModelServer(queue_script(Reply.text("answer two"))) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="t", max_retries=0)
        agent = Agent(db, session_id="s1", client=client, tools=ToolRegistry())
        holder = subprocess.Popen([sys.executable, "-m", "tests.helpers.lockholder",
                                   str(db.path)], cwd=ROOT, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "locked"
            first = agent.run_turn("first line")
        finally:
            holder.stdin.write("go\n")
            holder.stdin.close()
            holder.wait(timeout=30)
        assert first.failure_reason == "session_persistence_failed:locked"
        assert first.withdrawn == "first line"
        report_failure(first)
        assert "not sent to the model" in capsys.readouterr().err
        second = agent.run_turn("second line")
        assert second.completed
        (request,) = srv.requests
    assert user_texts(request) == ["second line"]
    stored = [m["content"] for m in strip_markers(db.get_messages("s1"))]
    assert stored == ["second line", "answer two"]
    assert not list(spool_dir_for(db.path).glob("*.jsonl"))  # "did not happen": not spooled
