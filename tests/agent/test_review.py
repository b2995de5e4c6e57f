"""The background review fork, through the real SDK against the local server."""
from __future__ import annotations

import time

import pytest

from hstate_agent import Agent, Reply, ToolRegistry
from hstate_agent.localmodel.server import LocalModelServer
from hstate_agent.memory.memory import MemoryStore
from hstate_agent.memory.memory_pending import PendingChanges
from hstate_agent.review.review_config import ReviewConfig
from hstate_agent.review.review_prompt import REVIEW_OPENING, REVIEW_PROMPT
from hstate_agent.memory.skills import SkillStore
from tests.helpers.review import TwoScripts, client_for, top_level_spans

SKILL = "---\nname: wal-check\ndescription: Check a WAL store before copying it\n---\n" \
        "1. Run hermes doctor.\n2. Copy the db with its -wal.\n"


def calc_tools(calls: list) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool("add", "Add two numbers.", {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "number"}}})
    def _add(a: float, b: float) -> float:
        calls.append((a, b))
        return a + b
    return reg


def make_agent(db, srv, *, config=None, summaries=None, tools=None, **kw) -> Agent:
    return Agent(db, client=client_for(srv), system_prompt="Be brief.", tools=tools,
                 review=config or ReviewConfig(),
                 on_review=summaries.append if summaries is not None else None, **kw)


def rows_of(db, sid):
    with db._read() as conn:
        msgs = list(conn.execute("SELECT * FROM messages WHERE session_id = ? ORDER BY id",
                                 (sid,)))
        session = list(conn.execute("SELECT * FROM sessions WHERE id = ?", (sid,)))
    return msgs, session


def test_fork_saves_memory_and_skill_with_provenance_and_is_billed(db, hermes_home):
    script = TwoScripts([Reply.text("Noted.")], [
        Reply.tool("memory", {"action": "add", "target": "user",
                              "content": "Prefers WAL mode."}),
        Reply.tool("skill_manage", {"action": "create", "name": "wal-check",
                                    "content": SKILL}),
        Reply.text("Saved two things.")])
    summaries: list[str] = []
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv, summaries=summaries)
        result = agent.run_turn("I always use WAL mode; remember that.")
        review = agent.reviewer.wait(10)
    assert result.completed and review.status == "done"
    assert review.actions == ["User profile updated", "Skill 'wal-check' created"]
    assert summaries == ["[review] User profile updated\n[review] Skill 'wal-check' created"]
    [entry] = MemoryStore(hermes_home).entries("user")
    assert (entry.text, entry.origin, entry.session_id) == (
        "Prefers WAL mode.", "background_review", agent.session_id)
    skills = SkillStore(hermes_home)
    assert skills.view("wal-check") == SKILL
    assert [(p["action"], p["origin"], p["session_id"]) for p in skills.provenance("wal-check")
            ] == [("create", "background_review", agent.session_id)]
    for path in (hermes_home / "memories" / "USER.md", hermes_home / "skills" / "wal-check"
                 / "SKILL.md"):
        assert path.stat().st_mode & 0o777 == 0o600
        assert path.parent.stat().st_mode & 0o777 == 0o700
    # Billed to the session's ledger, once, as the server reported; not as a turn.
    ledger = {r.task: r for r in db.session_usage(agent.session_id)}
    spent = script.reported(review=True)
    assert ledger["background_review"].input_tokens == spent["input_tokens"]
    assert ledger["background_review"].api_calls == spent["api_calls"] == 3
    assert db.get_session(agent.session_id).input_tokens == script.reported(False)[
        "input_tokens"] == ledger["turn"].input_tokens


def test_fork_first_request_repeats_the_live_prefix_byte_for_byte(db):
    script = TwoScripts([Reply.tool("add", {"a": 1, "b": 2}), Reply.text("3.")],
                        [Reply.text("Nothing to save.")])
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv, tools=calc_tools([]))
        agent.run_turn("add 1 and 2")
        agent.reviewer.wait(10)
        raw = list(srv.raw_requests)
    assert len(raw) == 3
    live, fork = top_level_spans(raw[1]), top_level_spans(raw[2])
    assert REVIEW_OPENING.encode() in fork["messages"] and REVIEW_OPENING.encode() not in raw[1]
    for key in ("model", "max_tokens", "system", "tools"):
        assert fork[key] == live[key], key
    # The live messages array, without its closing bracket, opens the fork's.
    assert fork["messages"].startswith(live["messages"][:-1])
    assert len(fork["messages"]) > len(live["messages"])


def test_non_whitelisted_and_asking_calls_are_denied_and_the_fork_goes_on(db, hermes_home):
    calls: list = []
    script = TwoScripts([Reply.text("Fine.")], [
        Reply.tool("add", {"a": 1, "b": 1}), Reply.tool("clarify", {"question": "?"}),
        Reply.tool("memory", {"action": "add", "target": "memory", "content": "Note."}),
        Reply.text("Done.")])
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv, tools=calc_tools(calls))
        agent.run_turn("hello")
        review = agent.reviewer.wait(10)
        requests = [r for _rv, r, _ in script.replies]
    assert calls == []  # the parent's tool never ran for the fork
    denied = requests[2]["messages"][-1]["content"][0]
    assert denied["is_error"] and "not available" in denied["content"] \
        and "Do not retry" in denied["content"] and "memory" in denied["content"]
    asked = requests[3]["messages"][-1]["content"][0]
    assert asked["is_error"] and "ask the user" in asked["content"]
    assert review.status == "done" and review.actions == ["Memory updated"]
    assert [e.text for e in MemoryStore(hermes_home).entries("memory")] == ["Note."]


def test_session_rows_after_a_review_equal_the_rows_before_it(db):
    script = TwoScripts([Reply.text("Hi.")], [
        Reply.tool("memory", {"action": "add", "target": "memory", "content": "x"}),
        Reply.text("Saved.")])
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv, config=ReviewConfig(enabled=False))
        agent.run_turn("hello")
        before = rows_of(db, agent.session_id)
        n_messages = len(agent.messages)
        review = agent.refine()
    assert review.status == "done" and review.billed
    assert rows_of(db, agent.session_id) == before
    assert len(agent.messages) == n_messages
    assert not any(REVIEW_OPENING in str(m.get("content")) for m in agent.messages)


def test_polluted_session_loads_without_harness_rows(db):
    sid = db.create_session("polluted", source="test")
    db.append_messages(sid, [{"role": "user", "content": "hi"},
                             {"role": "assistant", "content": "hello"},
                             {"role": "user", "content": REVIEW_PROMPT},
                             {"role": "assistant", "content": "Saved a memory."},
                             {"role": "user", "content": "and now?"},
                             {"role": "assistant", "content": "go on"}])
    script = TwoScripts([Reply.text("ok")], [])
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv, session_id=sid, config=ReviewConfig(enabled=False))
        assert [m["content"] for m in agent.messages] == ["hi", "hello", "and now?", "go on"]
        agent.run_turn("next")
    assert REVIEW_OPENING not in str(srv.requests[0]) and "Saved a memory" not in str(
        srv.requests[0])
    assert len(db.get_messages(sid)) == 8  # stored rows are left as they are


def slow_review(_request) -> Reply:
    return Reply.text("thinking " * 400, chunk_delay=0.02)  # ~10 s of streaming


def test_new_turn_cancels_the_fork_mid_stream_and_keeps_usage_apart(db):
    script = TwoScripts([Reply.text("One."), Reply.text("Two.")], slow_review)
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv)
        agent.run_turn("first")
        assert script.review_started.wait(5)
        time.sleep(0.2)  # well inside the stream
        t0 = time.perf_counter()
        second = agent.run_turn("second")
        elapsed = time.perf_counter() - t0
        review = agent.reviewer.last
        agent.reviewer.wait(5)
    assert second.completed and review.status == "cancelled"
    assert second.review_wait_s < 2.0 and elapsed < 2.0 + 1.0
    live = script.reported(review=False)
    session = db.get_session(agent.session_id)
    assert (session.input_tokens, session.output_tokens) == (live["input_tokens"],
                                                            live["output_tokens"])
    ledger = {r.task: r for r in db.session_usage(agent.session_id)}
    assert ledger["turn"].api_calls == 2 and ledger["turn"].input_tokens == live["input_tokens"]
    # The cut-short review is billed for the input it had sent, separately.
    assert ledger["background_review"].api_calls >= 1
    assert ledger["background_review"].output_tokens < script.reported(True)["output_tokens"]


def test_interrupt_reaches_the_fork(db):
    script = TwoScripts([Reply.text("One.")], slow_review)
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv)
        agent.run_turn("first")
        assert script.review_started.wait(5)
        run = agent.reviewer.current
        time.sleep(0.1)
        t0 = time.perf_counter()
        agent.interrupt()
        assert run.done.wait(2.0)
        assert time.perf_counter() - t0 < 2.0
    assert run.result.status == "cancelled" and agent.reviewer.current is None


def test_fork_raising_after_spending_tokens_is_billed_once(db, hermes_home):
    script = TwoScripts([Reply.text("Hi.")], [
        Reply.tool("memory", {"action": "add", "target": "memory", "content": "kept"}),
        Reply.error(500, "api_error")])
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv)
        agent.run_turn("hello")
        review = agent.reviewer.wait(10)
    assert review.status == "failed" and "InternalServerError" in review.error
    assert review.actions == ["Memory updated"]  # what was done before the failure stays
    assert [e.text for e in MemoryStore(hermes_home).entries("memory")] == ["kept"]
    [row] = [r for r in db.session_usage(agent.session_id) if r.task == "background_review"]
    assert (row.api_calls, row.input_tokens) == (1, script.reported(True)["input_tokens"])


def test_token_budget_stops_a_looping_fork(db):
    script = TwoScripts([Reply.text("Hi.")], lambda _r: Reply.tool("skills_list", {}))
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv, config=ReviewConfig(max_input_tokens=1500))
        agent.run_turn("hello")
        review = agent.reviewer.wait(20)
    assert review.status == "token_budget"
    assert 1 < review.steps < 16 and review.usage.prompt_tokens >= 1500
    [row] = [r for r in db.session_usage(agent.session_id) if r.task == "background_review"]
    assert row.api_calls == review.steps


def test_step_budget_when_the_token_budget_is_disabled(db):
    script = TwoScripts([Reply.text("Hi.")], lambda _r: Reply.tool("skills_list", {}))
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv, config=ReviewConfig(max_steps=3, max_input_tokens=0))
        agent.run_turn("hello")
        review = agent.reviewer.wait(20)
    assert (review.status, review.steps, review.usage.api_calls) == ("max_steps", 3, 3)


@pytest.mark.parametrize("reply", [Reply.error(500, "api_error"), None])
def test_no_review_after_a_turn_that_did_not_complete(db, reply):
    live = [reply] if reply else [Reply.tool("add", {"a": 1, "b": 1})] * 3
    script = TwoScripts(live, [Reply.text("Nothing to save.")])
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv, tools=calc_tools([]), max_steps=2)
        result = agent.run_turn("hello")
        time.sleep(0.2)
    assert not result.completed
    assert agent.reviewer.current is None and agent.reviewer.last is None
    assert not script.review_started.is_set()


def test_refine_runs_with_focus_when_automatic_review_is_off(db, hermes_home):
    script = TwoScripts([Reply.text("Hi.")], [
        Reply.tool("memory", {"action": "add", "target": "memory", "content": "a"}),
        Reply.tool("memory", {"action": "replace", "target": "memory", "old_text": "a",
                              "content": "b"}),
        Reply.text("ok")])
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv, config=ReviewConfig(enabled=False))
        agent.run_turn("hello")
        assert agent.reviewer.last is None
        review = agent.refine("the user's tools")
    reqs = [r for is_review, r, _ in script.replies if is_review]
    assert "Focus on: the user's tools" in str(reqs[0]["messages"][-1])
    # A review the user asked for applies replaces directly, as refine_review.
    [entry] = MemoryStore(hermes_home).entries("memory")
    assert (entry.text, entry.origin) == ("b", "refine_review")
    assert review.actions == ["Memory updated", "Memory updated"]


def test_unattended_replace_and_remove_are_staged_not_applied(db, hermes_home):
    store = MemoryStore(hermes_home)
    from hstate_agent.memory.memory import Provenance
    store.add("memory", "The store lives on NFS.", Provenance("user"))
    script = TwoScripts([Reply.text("Hi.")], [
        Reply.tool("memory", {"action": "replace", "target": "memory", "old_text": "NFS",
                              "content": "The store lives on ext4."}),
        Reply.tool("memory", {"action": "remove", "target": "memory", "old_text": "NFS"}),
        Reply.text("ok")])
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv)
        agent.run_turn("hello")
        review = agent.reviewer.wait(10)
    assert [e.text for e in store.entries("memory")] == ["The store lives on NFS."]
    pending = PendingChanges(store)
    staged = pending.list()
    assert [(c.action, c.origin, c.session_id) for c in staged] == [
        ("replace", "background_review", agent.session_id),
        ("remove", "background_review", agent.session_id)]
    assert review.actions[0] == "Memory replace staged (hermes memory pending)"
    results = pending.apply([staged[0].id])
    assert results[0]["applied"] and [e.text for e in store.entries("memory")] == [
        "The store lives on ext4."]
    assert [c.id for c in pending.list()] == [staged[1].id]


def test_a_stalled_review_stream_is_cut_at_once(db):
    # One chunk every 3 s: only shutting the socket down wakes the blocked read.
    script = TwoScripts([Reply.text("One."), Reply.text("Two.")],
                        lambda _r: Reply.text("x" * 200, chunk_delay=3.0))
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv)
        agent.run_turn("first")
        assert script.review_started.wait(5)
        time.sleep(0.3)
        second = agent.run_turn("second")
        assert agent.reviewer.last.status == "cancelled"
    assert second.completed and second.review_wait_s < 1.5


def test_a_review_that_cannot_stop_in_time_is_left_behind_after_2s(db, hermes_home):
    """The fork is inside a memory write blocked on the memories lock (held
    here): the live turn waits 2 s, goes on with a warning, and its usage
    stays its own."""
    import fcntl
    import os
    lock_dir = hermes_home / "memories"
    lock_dir.mkdir(parents=True, mode=0o700)
    fd = os.open(lock_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    script = TwoScripts([Reply.text("One."), Reply.text("Two.")], [
        Reply.tool("memory", {"action": "add", "target": "memory", "content": "late"}),
        Reply.text("Saved.")])
    try:
        with LocalModelServer(script) as srv:
            agent = make_agent(db, srv)
            agent.run_turn("first")
            run = agent.reviewer.current
            deadline = time.monotonic() + 5
            while len(script.replies) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # the fork is now blocked in flock
            second = agent.run_turn("second")
            assert 1.9 <= second.review_wait_s < 3.0 and second.completed
            assert not run.done.is_set()
            fcntl.flock(fd, fcntl.LOCK_UN)
            assert run.done.wait(5)
    finally:
        os.close(fd)
    assert run.result.status == "cancelled"  # stopped at its next check, after the write
    live = script.reported(review=False)
    assert db.get_session(agent.session_id).input_tokens == live["input_tokens"]


def test_a_finished_run_never_clears_a_newer_one(db):
    from hstate_agent.review.review_fork import ReviewRun
    with LocalModelServer(TwoScripts([], [])) as srv:
        agent = make_agent(db, srv)
    reviewer = agent.reviewer
    old, new = ReviewRun("background_review"), ReviewRun("refine_review")
    reviewer._current = new
    reviewer._finish(old)
    assert reviewer.current is new and old.done.is_set()
    reviewer._finish(new)
    assert reviewer.current is None


def test_summary_modes_and_malformed_results():
    from hstate_agent.review.review import format_summary
    from hstate_agent.review.review_fork import ReviewResult, _done_line
    result = ReviewResult("background_review", status="done", actions=["Memory updated"],
                          steps=2)
    assert format_summary(result, "off") is None
    assert format_summary(result, "on") == "[review] Memory updated"
    assert format_summary(result, "verbose").splitlines()[1].startswith("[review] done: 1 saved")
    assert format_summary(ReviewResult("background_review", status="done"), "on") is None
    assert _done_line("not json") is None and _done_line('["x"]') is None
    assert _done_line('{"done": "Skill \'x\' patched"}') == "Skill 'x' patched"


def test_a_failed_write_call_keeps_the_actions_already_done(db):
    script = TwoScripts([Reply.text("Hi.")], [
        Reply.tool("memory", {"action": "add", "target": "memory", "content": "one"}),
        Reply.tool("memory", {"action": "explode", "target": "memory"}),
        Reply.tool("skill_manage", {"action": "create", "name": "Bad Name", "content": "x"}),
        Reply.text("ok")])
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv)
        agent.run_turn("hello")
        review = agent.reviewer.wait(10)
    assert review.status == "done" and review.actions == ["Memory updated"]


def test_summary_leaves_out_saves_already_in_the_snapshot(db, hermes_home):
    script = TwoScripts([Reply.tool("memory", {"action": "add", "target": "memory",
                                               "content": "saved by the live turn"}),
                         Reply.text("Saved it.")], [Reply.text("Nothing to save.")])
    summaries: list[str] = []
    with LocalModelServer(script) as srv:
        agent = make_agent(db, srv, summaries=summaries)
        agent.run_turn("note this")
        review = agent.reviewer.wait(10)
    [entry] = MemoryStore(hermes_home).entries("memory")
    assert entry.origin == "assistant_tool" and entry.session_id == agent.session_id
    assert review.status == "done" and review.actions == [] and summaries == []
