"""HermesSaver: LangGraph's conformance suite, a real graph, prune, recover,
on both backends."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner
from langchain_core.messages import AIMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.graph import START, MessagesState, StateGraph

import hstate_recovery
from hstate_cli.main import cli
from sessiondb import SessionDB, StoreFace
from sessiondb.integrations.langgraph import HermesSaver
from tests.helpers import damage

pytestmark = pytest.mark.both_backends


@pytest.fixture
def store(open_store: Callable[..., StoreFace]) -> StoreFace:
    """The home's store: the CLI in a test reaches it (a file, or the server's URL)."""
    return open_store()


def test_the_conformance_suite_passes_every_capability(store: StoreFace) -> None:
    """Every base capability and every extended one (all are implemented)."""
    @checkpointer_test(name="HermesSaver")
    async def saver() -> Any:
        yield HermesSaver(store)
    failures: list[str] = []

    def seen(capability: str, test: str, passed: bool, error: str | None) -> None:
        if not passed:
            failures.append(f"{capability}/{test}: {(error or '')[-600:]}")
    report = asyncio.run(validate(saver, progress=ProgressCallbacks(on_test_result=seen)))
    assert failures == []
    assert {name for name, r in report.results.items() if r.detected and r.passed} == {
        c.value for c in ALL_CAPABILITIES}


def _echo(state: MessagesState) -> dict[str, Any]:
    said = state["messages"][-1].content
    return {"messages": [AIMessage(content=f"echo of {said}")]}


def _graph(saver: HermesSaver) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("echo", _echo)
    builder.add_edge(START, "echo")
    return builder.compile(checkpointer=saver)


def test_a_messages_graph_is_a_searchable_session(store: StoreFace) -> None:
    saver = HermesSaver(store)
    graph = _graph(saver)
    config = {"configurable": {"thread_id": "chat-7"}}
    for word in ("albatross", "binnacle", "capstan"):
        graph.invoke({"messages": [{"role": "user", "content": f"tell me about {word}"}]},
                     config)
    state = graph.get_state(config)
    assert [m.content for m in state.values["messages"]][-2:] == [
        "tell me about capstan", "echo of tell me about capstan"]
    transcript = store.get_messages("chat-7")
    assert [(m["role"], m["content"]) for m in transcript] == [
        (role, text) for word in ("albatross", "binnacle", "capstan")
        for role, text in (("user", f"tell me about {word}"),
                           ("assistant", f"echo of tell me about {word}"))]
    assert store.get_session("chat-7").source == "langgraph"
    store.catch_up_index()
    hits = CliRunner().invoke(cli, ["sessions", "search", "binnacle", "--json"],
                              catch_exceptions=False)
    assert hits.exit_code == 0, hits.output
    found = json.loads(hits.output)
    rows = found["hits"] if isinstance(found, dict) else found
    assert {(h["session_id"], h["role"]) for h in rows} == {("chat-7", "user"),
                                                            ("chat-7", "assistant")}
    listed = CliRunner().invoke(cli, ["sessions", "list", "--json"], catch_exceptions=False)
    assert "chat-7" in listed.output


def test_prune_of_a_thousand_checkpoints_keeps_the_newest(store: StoreFace) -> None:
    saver = HermesSaver(store, mirror_messages=False)
    graph = _graph(saver)
    config = {"configurable": {"thread_id": "long-thread"}}
    config = saver.put(config, *_checkpoint(saver, 0))
    for step in range(1, 1000):
        config = saver.put(config, *_checkpoint(saver, step))
    assert len(list(saver.list({"configurable": {"thread_id": "long-thread"}}))) == 1000
    newest = saver.get_tuple({"configurable": {"thread_id": "long-thread"}})
    saver.prune(["long-thread"])
    kept = list(saver.list({"configurable": {"thread_id": "long-thread"}}))
    assert [k.config for k in kept] == [newest.config]
    assert kept[0].checkpoint["channel_values"] == {"count": 999, "label": "fixed"}
    with store.core.read() as conn:
        (blobs,) = conn.execute("SELECT count(*) FROM graph_blobs").fetchone()
    assert blobs == 2  # the values the newest checkpoint points at, nothing else
    assert graph is not None


def _checkpoint(saver: HermesSaver, step: int) -> tuple[Any, Any, dict[str, str]]:
    from langgraph.checkpoint.base import empty_checkpoint
    cp = empty_checkpoint()
    cp["channel_values"] = {"count": step, "label": "fixed"}
    version = saver.get_next_version(None if step == 0 else f"{step}.0", None)
    cp["channel_versions"] = {"count": version, "label": "1.0"}
    new = {"count": version, **({"label": "1.0"} if step == 0 else {})}
    return cp, {"source": "loop", "step": step}, new


@pytest.mark.sqlite_only(reason="recover works on the SQLite file")
def test_recover_of_a_damaged_store_brings_the_checkpoints_back(store: StoreFace,
                                                                tmp_path: Path) -> None:
    saver = HermesSaver(store)
    graph = _graph(saver)
    for n in range(4):
        graph.invoke({"messages": [{"role": "user", "content": f"turn {n}"}]},
                     {"configurable": {"thread_id": "kept-thread"}})
    before = [t.checkpoint["channel_values"] for t in
              saver.list({"configurable": {"thread_id": "kept-thread"}})]
    store.close()
    src = Path(store.path)
    leaf = damage.pages_of(src, "messages_in_order", "leaf")
    damage.smash_page(src, (leaf or damage.pages_of(src, "messages_in_order"))[0])
    out = tmp_path / "recovered.db"
    report = hstate_recovery.recover(src, out, allow_partial=True)
    assert out.exists(), report
    with SessionDB(out) as again:
        restored = [t.checkpoint["channel_values"] for t in HermesSaver(again).list(
            {"configurable": {"thread_id": "kept-thread"}})]
        assert restored == before
        assert len(restored) == 4 * 3  # input, loop and end of each of four turns


def test_delete_thread_keeps_the_transcript(store: StoreFace) -> None:
    saver = HermesSaver(store)
    _graph(saver).invoke({"messages": [{"role": "user", "content": "hello"}]},
                         {"configurable": {"thread_id": "t-del"}})
    saver.delete_thread("t-del")
    assert saver.get_tuple({"configurable": {"thread_id": "t-del"}}) is None
    assert [m["content"] for m in store.get_messages("t-del")] == ["hello", "echo of hello"]


def test_deleting_the_session_takes_its_checkpoints(store: StoreFace) -> None:
    saver = HermesSaver(store)
    _graph(saver).invoke({"messages": [{"role": "user", "content": "bye"}]},
                         {"configurable": {"thread_id": "t-gone"}})
    store.delete_session("t-gone")
    assert saver.get_tuple({"configurable": {"thread_id": "t-gone"}}) is None
    with store.core.read() as conn:
        for table in ("graph_checkpoints", "graph_blobs", "graph_writes"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0


@pytest.mark.sqlite_only(reason="the migrate goes from the home's file to a server and back")
def test_migrate_carries_checkpoints_to_a_server_and_back(store: StoreFace, hermes_home: Path,
                                                          pg_db_url: str,
                                                          tmp_path: Path) -> None:
    saver = HermesSaver(store)
    _graph(saver).invoke({"messages": [{"role": "user", "content": "moored"}]},
                         {"configurable": {"thread_id": "moving"}})
    before = [t.checkpoint for t in saver.list({"configurable": {"thread_id": "moving"}})]
    store.close()
    out = CliRunner().invoke(cli, ["sessions", "migrate", "--to", pg_db_url, "--json"])
    assert out.exit_code == 0, out.output
    counts = json.loads(out.output)
    assert counts["verified"] and counts["source_counts"]["graph_checkpoints"] == len(before)
    with SessionDB.open(url=pg_db_url) as server:
        assert [t.checkpoint for t in HermesSaver(server).list(
            {"configurable": {"thread_id": "moving"}})] == before
    back = tmp_path / "back"
    res = CliRunner().invoke(cli, ["--home", str(back), "sessions", "migrate", "--from",
                                   pg_db_url, "--json"])
    assert res.exit_code == 0, res.output
    with SessionDB.open(back) as again:
        assert [t.checkpoint for t in HermesSaver(again).list(
            {"configurable": {"thread_id": "moving"}})] == before


@pytest.mark.sqlite_only(reason="the README's example uses the home's file")
def test_the_readme_example_runs_as_written(store: StoreFace) -> None:
    import re
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("### Agents on other frameworks", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    scope: dict[str, Any] = {}
    exec(blocks[1], scope)  # noqa: S102 - the documented example, as written
    scope["graph"].checkpointer.close()
    assert [m["content"] for m in store.get_messages("chat-7")] == ["Hello", "Hello back"]


def test_prune_checkpoints_keeps_the_newest_of_each_thread(store: StoreFace) -> None:
    saver = HermesSaver(store)
    graph = _graph(saver)
    for thread in ("one", "two"):
        for n in range(3):
            graph.invoke({"messages": [{"role": "user", "content": f"{thread} {n}"}]},
                         {"configurable": {"thread_id": thread}})
    newest = {t: saver.get_tuple({"configurable": {"thread_id": t}}) for t in ("one", "two")}
    dry = CliRunner().invoke(cli, ["sessions", "prune-checkpoints", "--dry-run", "--json"],
                             catch_exceptions=False)
    assert json.loads(dry.output)["checkpoints_deleted"] == 2 * (3 * 3 - 1)
    assert len(list(saver.list({"configurable": {"thread_id": "one"}}))) == 9
    res = CliRunner().invoke(cli, ["sessions", "prune-checkpoints", "--session", "one",
                                   "--json"], catch_exceptions=False)
    report = json.loads(res.output)
    assert report["per_thread"] == {"one": 8} and report["values_deleted"] > 0
    kept = list(saver.list({"configurable": {"thread_id": "one"}}))
    assert [k.config for k in kept] == [newest["one"].config]
    assert kept[0].checkpoint == newest["one"].checkpoint  # its values all still there
    assert len(list(saver.list({"configurable": {"thread_id": "two"}}))) == 9
    assert len(store.get_messages("one")) == 6  # the transcript stays
    human = CliRunner().invoke(cli, ["sessions", "prune-checkpoints"], catch_exceptions=False)
    assert human.output.startswith("Deleted 8 checkpoint(s) of 2 thread(s)")


@pytest.mark.sqlite_only(reason="recover works on the SQLite file")
def test_recover_reads_checkpoints_around_a_smashed_page_of_their_table(
        store: StoreFace, tmp_path: Path) -> None:
    saver = HermesSaver(store, mirror_messages=False)
    config = saver.put({"configurable": {"thread_id": "deep"}}, *_checkpoint(saver, 0))
    for step in range(1, 300):
        config = saver.put(config, *_checkpoint(saver, step))
    before = {t.config["configurable"]["checkpoint_id"] for t in saver.list(None)}
    store.close()
    src = Path(store.path)
    (interior, *_) = damage.pages_of(src, "graph_checkpoints", "internal")
    damage.smash_page(src, interior)  # the table's b-tree: SQL cannot walk it any more
    out = tmp_path / "recovered.db"
    report = hstate_recovery.recover(src, out, allow_partial=True)
    assert out.exists(), report
    with SessionDB(out) as again:
        after = {t.config["configurable"]["checkpoint_id"] for t in HermesSaver(again).list(None)}
        newest = HermesSaver(again).get_tuple({"configurable": {"thread_id": "deep"}})
    assert after == before
    assert newest is not None and newest.checkpoint["channel_values"]["count"] == 299


def _graph_rows(db: StoreFace) -> dict[str, list[tuple[Any, ...]]]:
    from sessiondb.rows import checkpoints
    out = {}
    with db.core.read() as conn:
        for table, columns in checkpoints.EXPORT_COLUMNS.items():
            out[table] = sorted(tuple(bytes(v) if isinstance(v, memoryview) else v for v in r)
                                for r in conn.execute(
                                    f"SELECT session_id, {', '.join(columns)} FROM {table}"))
    return out


def test_export_and_import_carry_every_checkpoint_value_and_write(
        store: StoreFace, open_store: Callable[..., StoreFace], tmp_path: Path) -> None:
    from sessiondb.importers import import_export_file
    saver = HermesSaver(store)
    graph = _graph(saver)
    for thread in ("exported-a", "exported-b"):
        for word in ("jib", "keel"):
            graph.invoke({"messages": [{"role": "user", "content": word}]},
                         {"configurable": {"thread_id": thread}})
    before = _graph_rows(store)
    assert all(before.values())  # checkpoints, values and pending writes all present
    path = tmp_path / "export.jsonl"
    store.export_to_path(None, "jsonl", path)
    end = json.loads(path.read_text().splitlines()[-1])
    assert end["graph_rows"] == {t: len(rows) for t, rows in before.items()}
    fresh = open_store(tmp_path / "fresh.db")
    result = import_export_file(fresh, path)
    assert result.graph_rows_added == result.graph_rows_in_file == end["graph_rows"]
    assert _graph_rows(fresh) == before
    config = {"configurable": {"thread_id": "exported-b"}}
    got = HermesSaver(fresh).get_tuple(config)
    assert got is not None and got.checkpoint == saver.get_tuple(config).checkpoint
    assert [t.checkpoint for t in HermesSaver(fresh).list(config)] == [
        t.checkpoint for t in saver.list(config)]
    again = import_export_file(fresh, path)  # a re-run adds nothing
    assert sum(again.graph_rows_added.values()) == 0 and _graph_rows(fresh) == before
