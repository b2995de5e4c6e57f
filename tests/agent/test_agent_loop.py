"""The agent loop through the real anthropic SDK against the local server."""
from __future__ import annotations

import json
import threading

import anthropic
import pytest

from hstate_agent import Agent, Reply, ToolRegistry
from hstate_agent.localmodel.server import LocalModelServer, queue_script
from sessiondb import MARKER_KEY, SessionDB, strip_markers


def client_for(server: LocalModelServer, retries: int = 2) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="local-test",
                               max_retries=retries)


def stored(db: SessionDB, sid: str) -> list[dict]:
    return strip_markers(db.get_messages(sid))


def registry_with(fn_name: str = "add", fn=None) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(fn_name, "Add two numbers.", {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "number"}}})
    def _add(a: float, b: float) -> float:
        return fn(a, b) if fn else a + b
    return reg


def test_plain_turn_is_persisted_with_usage(db):
    with LocalModelServer(queue_script(Reply.text("Hello there."))) as srv:
        agent = Agent(db, client=client_for(srv), system_prompt="Be brief.", tools=ToolRegistry())
        result = agent.run_turn("hi")
    assert (result.completed, result.failed, result.interrupted) == (True, False, False)
    assert result.final_response == "Hello there."
    rows = stored(db, agent.session_id)
    assert [m["role"] for m in rows] == ["system", "user", "assistant"]
    assert rows == strip_markers(agent.messages)
    session = db.get_session(agent.session_id)
    assert session.input_tokens == result.usage.input_tokens > 0
    assert session.output_tokens == result.usage.output_tokens > 0
    assert srv.requests[0]["system"] == "Be brief."


def test_multi_step_tool_use(db):
    script = queue_script(Reply.tool("add", {"a": 2, "b": 3}, text="Adding."),
                          Reply.tool("add", {"a": 5, "b": 10}), Reply.text("The sum is 15."))
    with LocalModelServer(script) as srv:
        agent = Agent(db, client=client_for(srv), tools=registry_with())
        result = agent.run_turn("add 2, 3 and 10")
    assert result.completed and result.steps == 3
    rows = stored(db, agent.session_id)
    assert [m["role"] for m in rows] == ["user", "assistant", "tool", "assistant", "tool",
                                         "assistant"]
    assert [m["content"] for m in rows if m["role"] == "tool"] == ["5", "15"]
    # The tool result went back to the model as a tool_result block for its call.
    last_request = srv.requests[-1]["messages"]
    results = [b for m in last_request for b in m["content"] if b["type"] == "tool_result"]
    calls = [b for m in last_request for b in m["content"] if b["type"] == "tool_use"]
    assert [r["tool_use_id"] for r in results] == [c["id"] for c in calls]
    assert db.get_session(agent.session_id).tool_call_count == 2


def test_tool_that_raises_becomes_an_error_result(db):
    def boom(a, b):
        raise ValueError("no numbers today")
    script = queue_script(Reply.tool("add", {"a": 1, "b": 2}), Reply.text("Sorry."))
    with LocalModelServer(script) as srv:
        agent = Agent(db, client=client_for(srv), tools=registry_with(fn=boom))
        result = agent.run_turn("add")
    assert result.completed
    tool_row = [m for m in stored(db, agent.session_id) if m["role"] == "tool"][0]
    assert tool_row["is_error"] is True
    assert tool_row["content"] == "ValueError: no numbers today"
    sent = [b for m in srv.requests[-1]["messages"] for b in m["content"]
            if b["type"] == "tool_result"]
    assert sent[0]["is_error"] is True


def test_max_steps_stops_the_loop(db):
    script = queue_script(*[Reply.tool("add", {"a": 1, "b": 1}) for _ in range(5)])
    with LocalModelServer(script) as srv:
        agent = Agent(db, client=client_for(srv), tools=registry_with(), max_steps=3)
        result = agent.run_turn("loop forever")
    assert (result.completed, result.failed, result.failure_reason) == (False, True, "max_steps")
    assert result.steps == 3 and len(srv.requests) == 3
    assert stored(db, agent.session_id) == strip_markers(agent.messages)


def test_streaming_text_callback(db):
    text = "A fairly long answer that arrives in several streamed chunks."
    with LocalModelServer(queue_script(Reply.text(text))) as srv:
        agent = Agent(db, client=client_for(srv), tools=ToolRegistry())
        chunks: list[str] = []
        result = agent.run_turn("talk", on_text=chunks.append)
    assert len(chunks) > 2 and "".join(chunks) == text == result.final_response


def test_interrupt_mid_stream_keeps_what_arrived(db):
    text = "x" * 16 * 40
    started = threading.Event()
    with LocalModelServer(queue_script(Reply.text(text, chunk_delay=0.02))) as srv:
        agent = Agent(db, client=client_for(srv), tools=ToolRegistry())
        watcher = threading.Thread(target=lambda: started.wait(10) and agent.interrupt())
        watcher.start()
        result = agent.run_turn("long please", on_text=lambda _t: started.set())
        watcher.join()
    assert (result.completed, result.interrupted, result.failed) == (False, True, False)
    rows = stored(db, agent.session_id)
    assert rows[-1]["finish_reason"] == "interrupted"
    assert 0 < len(rows[-1]["content"]) < len(text)


def test_rate_limit_then_success(db):
    script = queue_script(Reply.error(429, "rate_limit_error", retry_after=0.01),
                          Reply.text("ok now"))
    with LocalModelServer(script) as srv:
        agent = Agent(db, client=client_for(srv), tools=ToolRegistry())
        result = agent.run_turn("hi")
    assert result.completed and result.final_response == "ok now"
    assert len(srv.requests) == 2


def test_model_error_fails_the_turn_but_keeps_the_user_message(db):
    with LocalModelServer(queue_script(Reply.error(400, "invalid_request_error"))) as srv:
        agent = Agent(db, client=client_for(srv, retries=0), tools=ToolRegistry())
        result = agent.run_turn("hello?")
    assert result.failed and result.failure_reason == "model_error:invalid_request_error"
    assert [m["content"] for m in stored(db, agent.session_id)] == ["hello?"]


def test_resume_reproduces_the_transcript(open_store):
    db = open_store()
    script = queue_script(Reply.tool("add", {"a": 1, "b": 2}), Reply.text("3"),
                          Reply.text("again"))
    with LocalModelServer(script) as srv:
        first = Agent(db, client=client_for(srv), system_prompt="S", tools=registry_with())
        first.run_turn("one")
        before = strip_markers(first.messages)
        db.close()
        db2 = open_store()
        resumed = Agent(db2, session_id=first.session_id, client=client_for(srv),
                        system_prompt="S", tools=registry_with())
        assert strip_markers(resumed.messages) == before
        resumed.run_turn("two")
    sent = srv.requests[-1]["messages"]
    assert sent[0] == {"role": "user", "content": [{"type": "text", "text": "one"}]}
    assert stored(db2, first.session_id) == strip_markers(resumed.messages)


def test_markers_never_reach_the_api(db):
    script = queue_script(Reply.tool("add", {"a": 1, "b": 2}), Reply.text("3"), Reply.text("b"))
    with LocalModelServer(script) as srv:
        agent = Agent(db, client=client_for(srv), system_prompt="S", tools=registry_with())
        agent.run_turn("one")
        agent.run_turn("two")
    assert all(MARKER_KEY in m for m in agent.messages)
    for body in srv.requests:
        assert "_db_" not in json.dumps(body)


def test_builtin_session_tools(db):
    old = db.create_session("old-notes", source="test", title="Backups")
    db.append_messages(old, [{"role": "user", "content": "we rotate backups weekly"},
                             {"role": "assistant", "content": "noted: weekly rotation"}])
    script = queue_script(Reply.tool("session_search", {"query": "rotate backups"}),
                          Reply.tool("session_messages", {"session_id": old, "start": 1}),
                          Reply.text("Weekly."))
    with LocalModelServer(script) as srv:
        agent = Agent(db, client=client_for(srv))
        result = agent.run_turn("how often do we rotate backups?")
    assert result.completed
    found, read = [m for m in agent.messages if m["role"] == "tool"]
    assert "is_error" not in found and "is_error" not in read
    hits = json.loads(found["content"])  # the agent's own question is not a "past" hit
    assert [(h["session_id"], h["title"]) for h in hits] == [(old, "Backups")]
    assert "**backups**" in hits[0]["snippet"].lower()
    assert json.loads(read["content"]) == [{"role": "assistant",
                                            "content": "noted: weekly rotation"}]


def test_streamed_text_of_later_steps_starts_on_a_new_line(db):
    script = queue_script(Reply.tool("add", {"a": 1, "b": 2}, text="Adding."),
                          Reply.text("It is 3."))
    with LocalModelServer(script) as srv:
        agent = Agent(db, client=client_for(srv), tools=registry_with())
        chunks: list[str] = []
        agent.run_turn("add", on_text=chunks.append)
    assert "".join(chunks) == "Adding.\nIt is 3."
