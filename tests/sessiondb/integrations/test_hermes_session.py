"""HermesSession: exact round trips, search, concurrency, failures, both backends."""
from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from sessiondb import InvalidMessage, SessionDB, StoreFace
from sessiondb.integrations.openai_agents import HermesSession

pytestmark = pytest.mark.both_backends

#: One of each item type the Responses API puts in a session, and an unknown one.
ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "plain question about tides"},
    {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "what is in this picture"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}]},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [
        {"type": "output_text", "text": "a lighthouse at dusk", "annotations": [],
         "logprobs": []}]},
    {"type": "message", "role": "assistant", "content": [{"type": "refusal",
                                                          "refusal": "cannot say"}]},
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": "use metric units"},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
     "arguments": "{\"city\": \"Reykjavik\"}", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_1", "output": "sleet and 2 degrees"},
    {"type": "function_call_output", "call_id": "call_2", "output": [
        {"type": "input_text", "text": "chart attached"},
        {"type": "input_image", "image_url": "data:image/png;base64,BBBB"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [
        {"type": "summary_text", "text": "weighing the barometer"},
        {"type": "summary_text", "text": "then the wind"}], "encrypted_content": "gAAA=="},
    {"type": "computer_call", "id": "cu_1", "call_id": "call_3", "status": "completed",
     "action": {"type": "click", "x": 10, "y": 20, "button": "left"},
     "pending_safety_checks": []},
    {"type": "computer_call_output", "call_id": "call_3",
     "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,CCCC"}},
    {"type": "web_search_call", "id": "ws_1", "status": "completed",
     "action": {"type": "search", "query": "harbour opening hours"}},
    {"type": "file_search_call", "id": "fs_1", "status": "completed",
     "queries": ["ferry timetable"], "results": None},
    {"type": "code_interpreter_call", "id": "ci_1", "status": "completed",
     "code": "print(6 * 7)", "container_id": "c1", "outputs": [{"type": "logs", "logs": "42"}]},
    {"type": "mcp_call", "id": "mcp_1", "server_label": "docs", "name": "lookup",
     "arguments": "{\"q\": \"buoy\"}", "output": "buoy 7 is red"},
    {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "iVBOR"},
    {"type": "local_shell_call", "id": "ls_1", "call_id": "call_4", "status": "completed",
     "action": {"type": "exec", "command": ["ls", "-la"], "env": {}}},
    {"type": "item_reference", "id": "msg_0"},
    {"type": "some_future_item", "payload": {"deep": [1, 2.5, None, True, {"text": "later"}]},
     "_db_like_key": "kept", "agents_item": "a key of ours, kept"},
    {"role": "assistant", "content": "named", "name": 5, "timestamp": "not a time"},
]


@pytest.fixture
def store(open_store: Callable[..., StoreFace], tmp_path: Path) -> StoreFace:
    return open_store(tmp_path / "state.db")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_every_item_type_round_trips_exactly(store: StoreFace) -> None:
    session = HermesSession("trip", store)
    run(session.add_items(ITEMS))
    got = run(session.get_items())
    assert json.dumps(got, sort_keys=True) == json.dumps(ITEMS, sort_keys=True)
    assert got == ITEMS
    assert run(session.get_items(limit=3)) == ITEMS[-3:]
    assert store.count_messages(["trip"]) == len(ITEMS)  # one row per item


def test_text_worth_searching_is_found(store: StoreFace) -> None:
    session = HermesSession("searchable", store)
    run(session.add_items(ITEMS))
    store.catch_up_index()
    for words, role in [("lighthouse", "assistant"), ("picture", "user"),
                        ("Reykjavik", "assistant"), ("sleet", "tool"), ("barometer", "assistant"),
                        ("harbour", "assistant"), ("timetable", "assistant"),
                        ("buoy", "assistant"), ("chart", "tool")]:
        hits = store.search(words)
        assert [(h.session_id, h.role) for h in hits] == [("searchable", role)], words
    assert list(store.search("BBBB")) == []  # image data is not text


def test_limits_follow_the_sdk(store: StoreFace) -> None:
    session = HermesSession("limits", store, session_settings={"limit": 2})
    items = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    run(session.add_items(items))
    assert run(session.get_items()) == items[-2:]
    assert run(session.get_items(limit=4)) == items[-4:]
    assert run(session.get_items(limit=0)) == []
    assert run(session.get_items(limit=-1)) == items


def test_pop_and_clear_keep_the_rows_as_rewound(store: StoreFace) -> None:
    session = HermesSession("pops", store)
    assert run(session.pop_item()) is None
    run(session.add_items(ITEMS[:3]))
    assert run(session.pop_item()) == ITEMS[2]
    assert run(session.get_items()) == ITEMS[:2]
    run(session.clear_session())
    assert run(session.get_items()) == []
    assert store.count_messages(["pops"]) == 3  # nothing deleted
    kept = store.get_messages("pops", include_archived=True)
    assert {m["_db_state"] for m in kept} == {"rewound"}
    run(session.add_items([ITEMS[0]]))
    assert run(session.get_items()) == [ITEMS[0]]


def test_a_long_session_reads_whole_past_the_load_limit(store: StoreFace) -> None:
    store.load_limit = 7
    session = HermesSession("long", store)
    items = [{"role": "user", "content": f"n{i}"} for i in range(20)]
    run(session.add_items(items))
    assert run(session.get_items()) == items


def test_a_refused_batch_writes_nothing_and_the_session_goes_on(store: StoreFace) -> None:
    session = HermesSession("refused", store)
    run(session.add_items([ITEMS[0]]))
    with pytest.raises(InvalidMessage):
        run(session.add_items([ITEMS[1], {"role": "user", "content": object()}]))
    assert run(session.get_items()) == [ITEMS[0]]
    run(session.add_items([ITEMS[2]]))
    assert run(session.get_items()) == [ITEMS[0], ITEMS[2]]


def test_ids_the_store_does_not_allow_name_a_session_of_their_own(store: StoreFace) -> None:
    a, b = HermesSession("user 42/chat", store), HermesSession("user 42/chat ", store)
    run(a.add_items([{"role": "user", "content": "a"}]))
    run(b.add_items([{"role": "user", "content": "b"}]))
    assert a.store_session_id != b.store_session_id
    assert run(HermesSession("user 42/chat", store).get_items()) == [
        {"role": "user", "content": "a"}]
    assert store.get_session(a.store_session_id).title == "user 42/chat"
    assert store.get_session(a.store_session_id).source == "openai-agents"


def test_four_threads_on_two_event_loops_lose_and_repeat_nothing(store: StoreFace) -> None:
    session = HermesSession("busy", store)
    loops = [asyncio.new_event_loop() for _ in range(2)]
    runners = [threading.Thread(target=loop.run_forever) for loop in loops]
    for t in runners:
        t.start()

    def writer(n: int) -> None:
        loop = loops[n % 2]
        for i in range(25):
            asyncio.run_coroutine_threadsafe(session.add_items(
                [{"role": "user", "content": f"w{n}-{i}-a"},
                 {"role": "assistant", "content": f"w{n}-{i}-b"}]), loop).result(timeout=60)
    try:
        writers = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in writers:
            t.start()
        for t in writers:
            t.join(timeout=120)
    finally:
        for loop in loops:
            loop.call_soon_threadsafe(loop.stop)
        for t in runners:
            t.join(timeout=10)
        for loop in loops:
            loop.close()
    contents = [item["content"] for item in run(session.get_items())]
    assert len(contents) == 4 * 25 * 2 == len(set(contents))
    for n in range(4):  # each writer's batches in its own order, each batch together
        mine = [c for c in contents if c.startswith(f"w{n}-")]
        assert mine == [f"w{n}-{i}-{x}" for i in range(25) for x in "ab"]
    pairs = [contents[i:i + 2] for i in range(0, len(contents), 2)]
    assert all(p[0][:-1] == p[1][:-1] for p in pairs)


def test_a_cancelled_write_still_lands_before_the_cancel_is_raised(store: StoreFace) -> None:
    session = HermesSession("cancelled", store)

    async def main() -> None:
        task = asyncio.create_task(session.add_items([{"role": "user", "content": "once"}]))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await session.get_items() == [{"role": "user", "content": "once"}]
    run(main())


@pytest.mark.sqlite_only  # a path names a SQLite file
def test_a_path_or_the_home_opens_a_store_that_close_closes(hermes_home: Path,
                                                            tmp_path: Path,
                                                            backend: str) -> None:
    by_path = HermesSession("p", tmp_path / "own.db")
    run(by_path.add_items([{"role": "user", "content": "x"}]))
    by_path.close()
    with pytest.raises(RuntimeError, match="HermesSession is closed"):
        run(by_path.add_items([]))
    home = HermesSession("h")
    run(home.add_items([{"role": "user", "content": "y"}]))
    home.close()
    with SessionDB(tmp_path / "own.db") as again:
        assert again.count_messages(["p"]) == 1
    with SessionDB.open() as again:
        assert again.count_messages(["h"]) == 1


def test_a_store_passed_in_stays_open(store: StoreFace) -> None:
    session = HermesSession("shared", store)
    session.close()
    assert store.count_messages() == 0  # still usable


@pytest.mark.sqlite_only("a pure function: no store")
def test_the_fast_reader_gives_what_the_general_decoder_gives() -> None:
    """`items_from_rows` reads the two forms it writes without `decode`; any
    meta that is not exactly one of them (other keys, spaces, text after the
    object, a null path) must come out as the general decoder reads it."""
    from sessiondb.integrations.items import from_message, items_from_rows
    from sessiondb.rows import decode
    item = '{"id":"m","content":[{"type":"output_text","text":null}]}'
    metas = ['{"agents_item":%s}' % item,
             '{"agents_item":%s,"agents_text_at":["content",0,"text"]}' % item,
             '{"agents_item":%s,"agents_text_at":null}' % item,
             '{"agents_item":%s,"other":1,"agents_text_at":["content",0,"text"]}' % item,
             '{"agents_item":%s,"agents_text_at":["content",0,"text"],"other":1}' % item,
             '{"agents_item":%s} ' % item,
             '{"agents_item":1,"agents_item":%s}' % item,
             '{"agents_item":%s,"agents_text_at":["content",0,"text"]}{}' % item]
    for meta in metas:
        for kind, content in (("text", "words"), ("absent", None)):
            row = ("a", kind, content, None, meta, None)
            try:
                expected = from_message(decode(*row), owned=True)
            except ValueError as e:
                with pytest.raises(type(e)):
                    items_from_rows([row])
                continue
            assert items_from_rows([row]) == [expected], meta


def test_the_sdks_compaction_wrapper_rewinds_the_old_rows_never_deletes(
        store: StoreFace) -> None:
    """`OpenAIResponsesCompactionSession` over a HermesSession: its history
    rewrite hook is private, so it clears and re-adds through the protocol;
    the old rows stay on disk, rewound (the compact call is a stand-in)."""
    import types

    from agents.memory import OpenAIResponsesCompactionSession
    summary = {"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": "summary of the voyage"}]}

    class Responses:
        async def compact(self, **kw: Any) -> Any:
            return types.SimpleNamespace(output=[summary], usage=None)
    inner = HermesSession("voyage", store)
    client: Any = types.SimpleNamespace(responses=Responses())
    wrapper = OpenAIResponsesCompactionSession("voyage", inner, client=client,
                                               compaction_mode="input")
    legs = [{"role": "user", "content": f"leg {i}"} for i in range(4)]
    run(wrapper.add_items(legs))
    run(wrapper.run_compaction({"force": True}))
    assert run(inner.get_items()) == [summary]
    assert store.count_messages(["voyage"]) == len(legs) + 1  # nothing deleted
