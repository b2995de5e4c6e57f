"""Micro-compaction driven by the agent over many turns."""
from __future__ import annotations

import threading

import anthropic

from hstate_agent import Agent, CompactionPolicy
from hstate_agent.compact import SUMMARY_KEY, estimate_tokens, next_exchange
from hstate_agent.localmodel.server import LocalModelServer, Reply
from hstate_agent.localmodel.scripted import calc_registry, exchange_script
from sessiondb import SessionDB, strip_markers


def run_conversation(db: SessionDB, policy: CompactionPolicy | None, turns: int = 12,
                     on_summary=None):
    def script(request):
        if on_summary and "rolling summary" in str(request.get("system", "")):
            on_summary()
        return exchange_script(request)
    with LocalModelServer(script) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="k", max_retries=0)
        agent = Agent(db, client=client, system_prompt="You are careful.",
                      tools=calc_registry(), micro_compact=policy)
        sizes = []
        for i in range(turns):
            result = agent.run_turn(f"compute step {i} please")
            assert result.completed, result.failure_reason
            sizes.append(estimate_tokens(agent.messages))
    return agent, sizes


def test_compaction_bounds_the_active_transcript(open_store):
    plain, plain_sizes = run_conversation(open_store(), None)
    db = open_store(profile="compact")
    policy = CompactionPolicy(token_threshold=600, keep_tail=4)
    agent, sizes = run_conversation(db, policy)
    assert plain_sizes[-1] > 2 * sizes[-1]
    assert max(sizes[4:]) <= policy.token_threshold + 400  # one turn's growth above the bar
    # Nothing was deleted: every message of the plain run exists, live or archived.
    everything = db.get_messages(agent.session_id, include_archived=True)
    archived = [m for m in everything if m["_db_state"] == "archived"]
    assert len(everything) == len(plain.messages) + agent.compactor.compactions
    assert archived and all(m["_db_compaction_id"] for m in archived)
    # One live rolling summary; head (system + first user message) kept.
    live = db.get_messages(agent.session_id)
    assert sum(1 for m in live if m.get(SUMMARY_KEY)) == 1
    assert [m["role"] for m in live[:2]] == ["system", "user"]
    assert live[1]["content"] == "compute step 0 please"
    assert strip_markers(live) == strip_markers(agent.messages)


def test_summarizer_failures_are_skipped_not_stalling(open_store):
    db = open_store()
    calls = []

    def script(request):
        if "rolling summary" in str(request.get("system", "")):
            calls.append(1)
            return Reply.error(500, "api_error")
        return exchange_script(request)
    with LocalModelServer(script) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="k", max_retries=0)
        policy = CompactionPolicy(token_threshold=300, keep_tail=4, max_attempts=2)
        agent = Agent(db, client=client, tools=calc_registry(), micro_compact=policy)
        for i in range(5):
            assert agent.run_turn(f"step {i}").completed
    # Each exchange was tried at most twice, then skipped for good.
    assert agent.compactor.skipped
    assert len(calls) <= 2 * (len(agent.compactor.skipped) + 1) + 4
    assert agent.compactor.compactions == 0
    assert strip_markers(db.get_messages(agent.session_id)) == strip_markers(agent.messages)


def test_compaction_with_a_concurrent_writer(open_store, hermes_home):
    db = open_store(profile="busy")
    other = SessionDB.open(profile="busy")
    other_sid = other.create_session("bystander", source="test")
    appended = []

    def append_elsewhere():
        # Another connection commits while the summary is being produced.
        t = threading.Thread(target=lambda: appended.append(
            other.append_message(other_sid, {"role": "user", "content": f"n{len(appended)}"})))
        t.start()
        t.join()
    try:
        agent, _ = run_conversation(db, CompactionPolicy(token_threshold=500, keep_tail=4),
                                    turns=8, on_summary=append_elsewhere)
        assert agent.compactor.compactions > 0 and len(appended) == agent.compactor.compactions
        assert [m["content"] for m in db.get_messages(other_sid)] == \
            [f"n{i}" for i in range(len(appended))]
        assert strip_markers(db.get_messages(agent.session_id)) == strip_markers(agent.messages)
    finally:
        other.close()


def test_head_and_tail_are_protected():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u0"},
            {"role": "assistant", "content": "a0", "tool_calls": [{"id": "1"}]},
            {"role": "tool", "content": "r"}, {"role": "user", "content": "u1"},
            {"role": "assistant", "content": "a1"}]
    assert next_exchange(msgs, keep_tail=2, skipped=set()) == (2, 4)
    assert next_exchange(msgs, keep_tail=3, skipped=set()) is None  # tool result in the tail
    assert next_exchange(msgs[:2], keep_tail=0, skipped=set()) is None
