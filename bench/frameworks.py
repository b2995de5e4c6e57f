"""The integrations beside the frameworks' own SQLite stores, in one run.

Agents SDK: ``add_items`` of one item and ``get_items(limit=50)`` on a
10,000-item session, HermesSession against the SDK's ``SQLiteSession``
(a file) and ``AdvancedSQLiteSession`` (when installed), each on its own
file in the same directory: the reads, then the writes. Every subject is
timed the same way: rounds of ``--per-round`` calls (5) of one subject,
the rounds going through every order of the subjects in turn, so each
subject's first call of a round follows each other subject equally often.
(Timed call by call in one fixed order, one subject always followed
``AdvancedSQLiteSession``'s ~12-25 ms call, which leaves the CPU caches
cold, and the others never did.) ``--per-round 1`` times every call right
after another subject's: the cold case, as in an agent loop where a model
call comes between two reads. Two of the subjects share one SQLite library
(Python's ``sqlite3``) and HermesSession runs apsw's own, so there each
SDK session's call often meets its library's code still in the CPU's
caches from the other SDK session's call, and HermesSession's never does.
``--evict MIB`` stands in for the model call instead: before every timed
call it writes MIB MiB of memory in the event loop's thread and in the
executor's worker thread, which leaves every subject's code and data out
of the cores' own caches alike.

LangGraph: a three-node graph (``MessagesState``, nodes a -> b -> c each
adding a message) run turn after turn on one thread with HermesSaver and
with ``SqliteSaver``: wall time per checkpoint (the saver's put, put_writes
and get_tuple calls the graph makes), and bytes per checkpoint (the saver's
tables and indexes, from ``dbstat``, after a checkpoint of the WAL). The
same graph on LangGraph's ``InMemorySaver`` (no storage) is the floor: the
graph's own work, its serializer's included.

    python bench/frameworks.py [--quick] [--json] [--calls N] [--per-round N] [--evict MIB]
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, median, percentile  # noqa: E402

ITEM_TEXT = "a question about the harbour and its tides " * 4
#: LangGraph's in-memory saver: the graph's own cost per checkpoint.
FLOOR = "InMemorySaver (floor)"
#: Calls of one subject in a row before the next subject's (see `_rounds`).
PER_ROUND = 5


def _item(i: int) -> dict[str, Any]:
    if i % 2:
        return {"id": f"msg_{i}", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": ITEM_TEXT, "annotations": []}]}
    return {"role": "user", "content": ITEM_TEXT}


def agents_subjects(root: Path) -> dict[str, Any]:
    from agents import SQLiteSession

    from sessiondb import SessionDB
    from sessiondb.integrations.openai_agents import HermesSession
    subjects: dict[str, Any] = {
        "hermes": HermesSession("bench", SessionDB(root / "hermes.db", background_index=True)),
        "SQLiteSession": SQLiteSession("bench", root / "sdk.db"),
    }
    try:
        from agents.extensions.memory import AdvancedSQLiteSession
        subjects["AdvancedSQLiteSession"] = AdvancedSQLiteSession(
            session_id="bench", db_path=root / "advanced.db", create_tables=True)
    except ImportError:
        pass
    return subjects


async def bench_agents(root: Path, items: int, calls: int,
                       per_round: int = PER_ROUND, evict_mib: int = 0) -> dict[str, Any]:
    subjects = agents_subjects(root)
    for session in subjects.values():
        for start in range(0, items, 500):
            await session.add_items([_item(i) for i in range(start, min(items, start + 500))])
    # The setup's 10,000 rows are indexed before the clock starts (the search
    # index is built after commits, in the background; a read measured while
    # it still catches up would time that work, which SQLiteSession has none of).
    subjects["hermes"].db.catch_up_index()
    timings: dict[str, dict[str, list[float]]] = {n: {"add_items(1)": [], "get_items(50)": []}
                                                  for n in subjects}
    # Reads first, then writes: a read right after a write would meet the
    # store's indexer catching up.
    added = {id(s): items for s in subjects.values()}  # each subject gets the same items

    async def read(session: Any) -> None:
        assert len(await session.get_items(limit=50)) == 50

    async def write(session: Any) -> None:
        await session.add_items([_item(added[id(session)])])
        added[id(session)] += 1
    between = _evictor(evict_mib)
    for op, call in (("get_items(50)", read), ("add_items(1)", write)):
        await _rounds(subjects, calls, call, timings, op, per_round, between)
    for session in subjects.values():
        session.close()
    return _summary(timings)


def _evictor(mib: int) -> Callable[[], Any] | None:
    """With ``mib``: a coroutine function writing ``mib`` MiB, one byte per
    64-byte cache line, in this thread and then in the default executor's
    worker (the thread a subject's next call runs in: an idle worker is
    reused), so the call that follows finds the cores' caches holding none
    of the previous call's code or data."""
    if not mib:
        return None
    buf = bytearray(mib << 20)
    zeros = bytes(len(buf) // 64)

    def touch() -> None:
        buf[::64] = zeros

    async def evict() -> None:
        touch()
        await asyncio.to_thread(touch)
    return evict


async def _rounds(subjects: dict[str, Any], calls: int, call: Callable[[Any], Any],
                  timings: dict[str, dict[str, list[float]]], op: str, per_round: int,
                  between: Callable[[], Any] | None = None) -> None:
    """``calls`` timed calls per subject, in rounds of ``per_round`` calls of
    one subject after another, each round in the next of the subjects'
    orders (every permutation in turn): every subject follows every other
    equally often, so none is always timed right after a slower subject's
    call has left the CPU caches cold."""
    orders = list(itertools.permutations(subjects))
    for r in range(-(-calls // per_round)):
        for name in orders[r % len(orders)]:
            for _ in range(min(per_round, calls - r * per_round)):
                if between is not None:
                    await between()
                t0 = time.perf_counter()
                await call(subjects[name])
                timings[name][op].append(time.perf_counter() - t0)


def _summary(timings: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, ops in timings.items():
        out[name] = {op: {"median_us": round(median(v) * 1e6, 1),
                          "p95_us": round(percentile(v, 95) * 1e6, 1)} for op, v in ops.items()}
    base = out["hermes"]
    for name in out:
        if name != "hermes":
            out[name]["ratio_to_hermes"] = {
                op: round(out[name][op]["median_us"] / base[op]["median_us"], 2) for op in base}
    return out


def three_node_graph(saver: Any) -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    def node(label: str) -> Callable[[MessagesState], dict[str, Any]]:
        def run(state: MessagesState) -> dict[str, Any]:
            return {"messages": [AIMessage(content=f"{label}: noted {len(state['messages'])}")]}
        return run
    builder = StateGraph(MessagesState)
    for label in "abc":
        builder.add_node(label, node(label))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    return builder.compile(checkpointer=saver)


def saver_bytes(path: Path, tables: tuple[str, ...]) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE tbl_name IN (%s)" % ",".join("?" * len(tables)),
            tables)]
        return sum(conn.execute("SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = ?",
                                (n,)).fetchone()[0] for n in names)
    finally:
        conn.close()


def bench_langgraph(root: Path, turns: int) -> dict[str, Any]:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    from sessiondb import SessionDB
    from sessiondb.integrations.langgraph import HermesSaver
    store = SessionDB(root / "lg-hermes.db")
    sdk_conn = sqlite3.connect(root / "lg-sqlite.db", check_same_thread=False)
    savers = {"hermes": HermesSaver(store), "SqliteSaver": SqliteSaver(sdk_conn),
              FLOOR: InMemorySaver()}
    graphs = {name: three_node_graph(s) for name, s in savers.items()}
    per_turn: dict[str, list[float]] = {name: [] for name in savers}
    for turn in range(turns):
        for name, graph in graphs.items():
            config = {"configurable": {"thread_id": "bench-thread"}}
            t0 = time.perf_counter()
            graph.invoke({"messages": [{"role": "user", "content": f"turn {turn} " + ITEM_TEXT}]},
                         config)
            per_turn[name].append(time.perf_counter() - t0)
    counts = {name: len(list(s.list({"configurable": {"thread_id": "bench-thread"}})))
              for name, s in savers.items()}
    store.close()
    sdk_conn.close()
    nbytes = {"hermes": saver_bytes(root / "lg-hermes.db",
                                    ("graph_checkpoints", "graph_blobs", "graph_writes")),
              "SqliteSaver": saver_bytes(root / "lg-sqlite.db", ("checkpoints", "writes")),
              FLOOR: 0}
    out: dict[str, Any] = {}
    for name in savers:
        per_ckpt = counts[name] / turns
        out[name] = {"checkpoints": counts[name],
                     "turn_median_ms": round(median(per_turn[name]) * 1e3, 2),
                     "per_checkpoint_median_us": round(median(per_turn[name]) / per_ckpt * 1e6, 1),
                     "bytes_per_checkpoint": round(nbytes[name] / counts[name])}
    del out[FLOOR]["bytes_per_checkpoint"]  # nothing stored
    out["SqliteSaver"]["ratio_to_hermes"] = {
        k: round(out["SqliteSaver"][k] / out["hermes"][k], 2)
        for k in ("per_checkpoint_median_us", "bytes_per_checkpoint")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--calls", type=int, help="timed Agents SDK calls per subject and "
                        "operation (default 600; --quick 50)")
    parser.add_argument("--per-round", type=int, default=PER_ROUND,
                        help=f"calls of one subject in a row (default {PER_ROUND}; 1: every "
                             "call right after another subject's)")
    parser.add_argument("--evict", type=int, default=0, metavar="MIB",
                        help="before every timed call, write MIB MiB of memory in the loop's "
                             "and the worker's thread (a model call's stand-in; default 0)")
    args = parser.parse_args()
    items, calls, turns = (1000, 50, 10) if args.quick else (10_000, 600, 60)
    calls = args.calls or calls
    with tempfile.TemporaryDirectory(prefix="hermes-bench-frameworks-") as tmp:
        root = Path(tmp)
        result = {"machine": machine(), "items": items, "calls": calls, "turns": turns,
                  "per_round": args.per_round, "evict_mib": args.evict,
                  "agents": asyncio.run(bench_agents(root, items, calls, args.per_round,
                                                     args.evict)),
                  "langgraph": bench_langgraph(root, turns)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"Agents SDK, {items:,}-item session, {calls} calls each (median / p95, us):")
    for name, ops in result["agents"].items():
        cells = "  ".join(f"{op} {v['median_us']:>8} / {v['p95_us']:<8}"
                          for op, v in ops.items() if op != "ratio_to_hermes")
        print(f"  {name:<22} {cells}  {ops.get('ratio_to_hermes', '')}")
    print(f"LangGraph, 3-node graph, {turns} turns on one thread:")
    for name, r in result["langgraph"].items():
        print(f"  {name:<22} {r}")


if __name__ == "__main__":
    main()
