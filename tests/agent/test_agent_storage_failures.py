"""Storage failing mid-turn: the turn fails closed, the answer still reaches
the user, unwritten messages are spooled, and import_spool completes the store."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anthropic
import pytest

from hstate_agent import Agent, Reply, ToolRegistry
from hstate_agent.localmodel.server import LocalModelServer, queue_script
from sessiondb import SessionDB, import_spool, strip_markers
from sessiondb.importers.spool_import import spool_dir_for
from tests.helpers.faultvfs import FaultVFS

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "The final answer is forty-two, and it is long enough to stream in chunks."


def client_for(server: LocalModelServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="local-test", max_retries=0)


def spooled_contents(db: SessionDB, sid: str) -> list:
    path = spool_dir_for(db.path) / f"{sid}.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["message"].get("content") for r in lines if r.get("kind") == "message"]


@pytest.fixture
def vfs():
    shim = FaultVFS(f"agentfault{os.getpid()}")
    yield shim
    shim.unregister()


def test_disk_full_while_storing_the_answer(vfs, hermes_home):
    db = SessionDB.open(vfs=vfs.name)
    try:
        with LocalModelServer(queue_script(Reply.text(ANSWER))) as srv:
            agent = Agent(db, client=client_for(srv), tools=ToolRegistry())
            armed = []

            def arm(_text: str) -> None:
                if not armed:  # the disk fills up while the answer streams in
                    vfs.faults.arm_full(1)
                    armed.append(True)
            result = agent.run_turn("question", on_text=arm)
        assert (result.completed, result.failed) == (False, True)
        assert result.failure_reason == "session_persistence_failed:disk_full"
        assert result.final_response == ANSWER
        assert result.explanation.code == "storage_disk_full"
        assert any("import-spool" in a for a in result.explanation.actions)
        # The user message was stored before the fault; the answer was spooled.
        assert [m["content"] for m in strip_markers(db.get_messages(agent.session_id))] == \
            ["question"]
        assert spooled_contents(db, agent.session_id) == [ANSWER]
        vfs.faults.clear()
        report = import_spool(db)
        assert report.imported == 1
        assert strip_markers(db.get_messages(agent.session_id)) == strip_markers(agent.messages)
    finally:
        vfs.faults.clear()
        db.close()


def test_lock_held_past_patience(open_store, hermes_home):
    db = open_store(patience=0.3)
    holder = None
    with LocalModelServer(queue_script(Reply.text(ANSWER))) as srv:
        agent = Agent(db, client=client_for(srv), tools=ToolRegistry())

        def grab_lock(_text: str) -> None:
            nonlocal holder
            if holder is None:  # another process takes the write lock mid-answer
                holder = subprocess.Popen([sys.executable, "-m", "tests.helpers.lockholder",
                                           str(db.path)], cwd=ROOT, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True)
                assert holder.stdout.readline().strip() == "locked"
        try:
            result = agent.run_turn("question", on_text=grab_lock)
        finally:
            if holder is not None:
                holder.stdin.write("go\n")
                holder.stdin.close()
                holder.wait(timeout=30)
    assert result.failed and result.failure_reason == "session_persistence_failed:locked"
    assert result.final_response == ANSWER
    assert result.explanation.code == "storage_locked"
    assert spooled_contents(db, agent.session_id) == [ANSWER]
    assert [m["content"] for m in strip_markers(db.get_messages(agent.session_id))] == \
        ["question"]
    import_spool(db)
    assert strip_markers(db.get_messages(agent.session_id)) == strip_markers(agent.messages)


def test_corrupt_store_fails_the_turn_closed(hermes_home):
    from tests.sessiondb.engine.test_containment_faults import bundle_bytes, page_of, smash_page
    path = hermes_home / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="test")
        db.append_messages("s", [{"role": "user", "content": f"old {i}"} for i in range(3)])
    root, size = page_of(path, "sqlite_autoindex_messages_1")  # an index every insert must update
    smash_page(path, root, size)
    db = SessionDB(path)
    try:
        with LocalModelServer(queue_script(Reply.text(ANSWER))) as srv:
            agent = Agent(db, session_id="s", client=client_for(srv), tools=ToolRegistry())
            result = agent.run_turn("are you there?")
            after = bundle_bytes(path)
            again = agent.run_turn("still there?")  # refused without touching the file
            assert srv.requests == []  # failed closed before asking the model
        assert result.failed and result.failure_reason == "session_persistence_failed:corrupt"
        assert result.explanation.code == "storage_corrupt"
        assert any("--inspect-only" in a for a in result.explanation.actions)
        assert db.quarantined
        assert again.failure_reason == "session_persistence_failed:corrupt"
        assert spooled_contents(db, "s") == ["are you there?", "still there?"]
    finally:
        db.close()
    assert bundle_bytes(path) == after  # quarantined: no write, no checkpoint on close
