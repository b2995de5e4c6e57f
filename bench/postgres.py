"""PostgreSQL beside SQLite on this machine's loopback: B1, B2 and search.

One run starts a throwaway PostgreSQL cluster (durable defaults: fsync and
synchronous_commit on; unix socket in its own temp dir) and measures, in
the same run:

- **B1** append: commit-each and batches of 100, messages/s and p99 call
  latency, for our store on SQLite (NORMAL and FULL), our PostgreSQL
  schema written raw (`pg-floor`, and `pg-floor-no-search` without the
  search migrations), our store on PostgreSQL (`pg-ours`, when the tree
  has `SessionDB.open(url=...)`) and LangGraph's `PostgresSaver`
  (capped: its checkpoint re-serializes the whole conversation);
- **B2** contention: 8 writer processes for a fixed time, one message per
  commit each to its own session; on PostgreSQL as 2 simulated hosts of 4
  processes (each process its own connection pool, tagged by host), on
  SQLite all 8 on one file. Aggregate commits/s, p99, errors that reached
  the caller, and stored = acknowledged; `pg-floor-no-search sc=off` (raw
  inserts, no search column or index) is the ceiling any PostgreSQL
  design reaches on this machine;
- **search**: bench/search.py's corpus and query classes, our PostgreSQL
  search (`sessiondb/pg/search.py`) against the like-for-like raw
  `tsvector` floor (docs/benchmarks.md says which statement per class).

    python bench/postgres.py --quick
    python bench/postgres.py --messages 10000 --seconds 20 --corpus 200000
    python bench/postgres.py --only search --corpus 1000000 --keep /tmp/pgbench
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import message, percentile  # noqa: E402
from pg_subjects import (BenchServer, LangGraphPostgres, PgFloor, PgOurs,  # noqa: E402
                         langgraph_status, pg_ours_status, relaxed)
from subjects import Ours  # noqa: E402

import pg_search_bench  # noqa: E402

LG_CAPS = {1: (300, 1000), 100: (2000, 5000)}  # (quick, full) messages for LangGraph


class Lane:
    """One subject in the B1 race: append blocks, per-call latencies."""

    def __init__(self, name: str, make: Callable[[], Any], n: int, batch: int) -> None:
        self.name, self.n, self.batch = name, n, batch
        self.msgs = [message(i) for i in range(n)]
        self.lat: list[float] = []
        self.done, self.elapsed, self.error = 0, 0.0, None
        try:
            self.subject = make()
        except Exception as e:  # unavailable peers are reported, never dropped
            self.subject, self.error = None, f"{type(e).__name__}: {e}".splitlines()[0]

    @property
    def active(self) -> bool:
        return self.error is None and self.done < self.n

    def block(self, count: int) -> None:
        stop = min(self.n, self.done + count)
        try:
            while self.done < stop:
                t0 = time.perf_counter()
                self.subject.append(self.msgs[self.done:self.done + self.batch])
                took = time.perf_counter() - t0
                self.lat.append(took)
                self.elapsed += took
                self.done += self.batch
        except Exception as e:
            self.error = f"failed after {self.done}: {type(e).__name__}: {e}".splitlines()[0]

    def result(self) -> dict[str, Any]:
        if self.subject is not None:
            self.subject.close()
        if self.error or not self.done:
            return {"unavailable": self.error or "wrote nothing"}
        return {"messages": self.done, "msg_per_s": self.done / self.elapsed,
                "p99_ms": percentile(self.lat, 99) * 1e3}


class _SqliteOurs:
    def __init__(self, path: Path, sync: str, key: str) -> None:
        self.s = Ours()
        self.s.open(path, sync, key)

    def append(self, batch: list[dict[str, Any]]) -> None:
        self.s.append(batch)

    def close(self) -> None:
        self.s.settle()
        self.s.close()


def _pg_lanes(server: BenchServer, batch: int, n: int, quick: bool) -> list[Lane]:
    """Every PostgreSQL subject twice: durable commits (synchronous_commit
    on, beside SQLite FULL) and relaxed ones (off, beside SQLite NORMAL)."""
    lanes = []
    cap = min(n, LG_CAPS[batch][0 if quick else 1])
    for mode, wrap in (("on", str), ("off", relaxed)):
        def db(name: str, search: bool = True, _m: str = mode) -> str:
            return server.database(f"{name}{batch}{_m}", search=search)
        lanes += [Lane(f"pg-floor sc={mode}", lambda w=wrap, d=db: PgFloor(w(d("floor")), "b1"),
                       n, batch),
                  Lane(f"pg-floor-no-search sc={mode}", lambda w=wrap, d=db: PgFloor(
                      w(d("nosearch", False)), "b1"), n, batch)]
        if pg_ours_status() == "ok":
            lanes.append(Lane(f"pg-ours sc={mode}", lambda w=wrap, d=db: PgOurs(
                w(d("ours")), "b1"), n, batch))
        if langgraph_status() == "ok":
            lanes.append(Lane(f"langgraph-postgres sc={mode}", lambda w=wrap, m=mode: (
                LangGraphPostgres(w(server.empty_database(f"lg{batch}{m}")), "b1")), cap, batch))
    return lanes


def b1_case(server: BenchServer, root: Path, batch: int, n: int, quick: bool) -> dict:
    lanes = [Lane("sqlite-ours NORMAL", lambda: _SqliteOurs(root / f"n{batch}.db", "NORMAL",
                                                           "b1"), n, batch),
             Lane("sqlite-ours FULL", lambda: _SqliteOurs(root / f"f{batch}.db", "FULL", "b1"),
                  n, batch), *_pg_lanes(server, batch, n, quick)]
    while any(lane.active for lane in lanes):
        for lane in lanes:
            if lane.active:
                lane.block(500 if batch == 1 else 2000)
    results = {lane.name: lane.result() for lane in lanes}
    for name, why in (("pg-ours", pg_ours_status()), ("langgraph-postgres", langgraph_status())):
        if why != "ok":
            results[name] = {"unavailable": why.removeprefix("unavailable: ")}
    return {"batch": batch, "messages": n, "results": results}


def b1_line(case: dict) -> str:
    parts = []
    for name, r in case["results"].items():
        if "unavailable" in r:
            parts.append(f"{name} unavailable: {r['unavailable']}")
            continue
        capped = f" (over {r['messages']:,})" if r["messages"] < case["messages"] else ""
        parts.append(f"{name} {r['msg_per_s']:,.0f}/s p99 {r['p99_ms']:.2f}ms{capped}")
    label = "commit each" if case["batch"] == 1 else f"batch {case['batch']}"
    return f"B1 {case['messages']:,} {label} | " + " | ".join(parts)


# -- B2 ------------------------------------------------------------------------

SQLITE_SYNC = {"sqlite-ours": "NORMAL", "sqlite-ours-full": "FULL"}


def _open_writer(kind: str, where: str, key: str, host: int) -> Any:
    if kind in SQLITE_SYNC:
        return _SqliteOurs(Path(where), SQLITE_SYNC[kind], key)
    if kind == "pg-ours":
        return PgOurs(where, key)
    from psycopg_pool import ConnectionPool
    pool = ConnectionPool(where, min_size=1, max_size=2, open=True,
                          kwargs={"application_name": f"bench-host-{host}"})
    return PgFloor(where, key, pool)


def _writer(kind: str, where: str, key: str, host: int, ready: Any, go: Any, stop_at: Any,
            out: Any) -> None:
    subject = _open_writer(kind, where, key, host)
    ready.wait()  # connected: the clock starts when every writer is
    lat: list[float] = []
    errors: Counter[str] = Counter()
    acked = 0
    go.wait()
    cpu = time.process_time()
    while time.time() < stop_at.value:
        t0 = time.perf_counter()
        try:
            subject.append([message(acked)])
        except Exception as e:  # what reaches a caller is what we count
            errors[f"{type(e).__name__}: {str(e)[:60]}"] += 1
            continue
        lat.append(time.perf_counter() - t0)
        acked += 1
    cpu = time.process_time() - cpu
    subject.close()
    out.put({"key": key, "commits": len(lat), "acked": acked, "p99": percentile(lat, 99),
             "errors": dict(errors), "cpu_s": cpu})


def _stored(kind: str, where: str, key: str) -> int:
    if kind in SQLITE_SYNC:
        s = Ours()
        s.open(Path(where), SQLITE_SYNC[kind], key)
        try:
            return s.load()
        finally:
            s.close()
    subject = PgOurs(where, key) if kind == "pg-ours" else PgFloor(where, key)
    try:
        return subject.count()
    finally:
        subject.close()


def b2_one(kind: str, where: str, writers: int, seconds: float,
           server: BenchServer | None = None) -> dict[str, Any]:
    """One race; on PostgreSQL also the server's CPU over it (every server
    process: backends, WAL writer, checkpointer) and what its backends
    waited on (pg_stat_activity sampled every 20 ms)."""
    keys = [f"w{i}" for i in range(writers)]
    for key in keys:  # every conversation exists before the race
        _open_writer(kind, where, key, 0).close()
    ctx = mp.get_context("fork")
    go, out, stop_at = ctx.Event(), ctx.Queue(), ctx.Value("d", 0.0)
    ready = ctx.Barrier(len(keys) + 1)
    procs = [ctx.Process(target=_writer, args=(kind, where, k, i * 2 // writers, ready, go,
                                               stop_at, out)) for i, k in enumerate(keys)]
    for p in procs:
        p.start()
    ready.wait(timeout=120)  # every process connected before the clock starts
    watch = WaitSampler(server, where) if server is not None else None
    stop_at.value = time.time() + seconds
    go.set()
    waits, server_cpu = watch.finish(stop_at.value) if watch else ({}, 0.0)
    reports = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    errors: Counter[str] = Counter()
    for r in reports:
        errors.update(r["errors"])
    ok = all(_stored(kind, where, r["key"]) == r["acked"] for r in reports)
    commits = sum(r["commits"] for r in reports)
    return {"commits_per_s": commits / seconds,
            "p99_ms": max(r["p99"] for r in reports) * 1e3, "errors": dict(errors),
            "acked_equals_stored": ok, "acked": sum(r["acked"] for r in reports),
            "client_cpu_ms_per_commit": sum(r["cpu_s"] for r in reports) * 1e3 / max(commits, 1),
            "server_cpu_ms_per_commit": server_cpu * 1e3 / max(commits, 1), "waits": waits}


class WaitSampler:
    """The server's CPU seconds between construction and `finish`, and the
    wait events of the race database's active backends, sampled meanwhile."""

    def __init__(self, server: BenchServer, url: str) -> None:
        import psycopg
        self.server, self.conn = server, psycopg.connect(server.url(), autocommit=True)
        self.dbname = url.split("?", 1)[0].rsplit("/", 1)[1]
        self.first = server.cpu_by_process()
        self.last = dict(self.first)

    def _cpu(self) -> None:
        """Per process, so one that exits (an autovacuum worker) is not
        subtracted: CPU since the first sample, as of its last one."""
        self.last.update(self.server.cpu_by_process())

    def finish(self, until: float) -> tuple[dict[str, float], float]:
        seen: Counter[str] = Counter()
        samples = 0
        while time.time() < until:
            for (event,) in self.conn.execute(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM"
                    " pg_stat_activity WHERE datname = %s AND state = 'active'", (self.dbname,)):
                seen[event] += 1
            samples += 1
            if samples % 25 == 0:
                self._cpu()
            time.sleep(0.02)
        self._cpu()
        cpu = sum(t - self.first.get(pid, 0.0) for pid, t in self.last.items())
        self.conn.close()
        # Mean backends in each state per sample (8 writers: the sum is at most 8).
        return {k: round(v / max(samples, 1), 2) for k, v in seen.most_common(6)}, cpu


def b2(server: BenchServer, root: Path, seconds: float) -> dict[str, Any]:
    runs = {"sqlite-ours NORMAL (1 file)": ("sqlite-ours", str(root / "b2.db")),
            "sqlite-ours FULL (1 file)": ("sqlite-ours-full", str(root / "b2full.db")),
            "pg-floor sc=on (2 hosts)": ("pg-floor", server.database("b2floor")),
            "pg-floor sc=off (2 hosts)": ("pg-floor", relaxed(server.database("b2floor2"))),
            # The ceiling of any PostgreSQL design here: a raw row, no search at all.
            "pg-floor-no-search sc=off (2 hosts)": ("pg-floor", relaxed(
                server.database("b2nosearch", search=False)))}
    if pg_ours_status() == "ok":
        runs["pg-ours sc=on (2 hosts)"] = ("pg-ours", server.database("b2ours"))
        runs["pg-ours sc=off (2 hosts)"] = ("pg-ours", relaxed(server.database("b2ours2")))
    out: dict[str, Any] = {"writers": 8, "seconds": seconds, "results": {}}
    for label, (kind, where) in runs.items():
        out["results"][label] = b2_one(kind, where, 8, seconds,
                                       None if kind in SQLITE_SYNC else server)
    if pg_ours_status() != "ok":
        out["results"]["pg-ours (2 hosts)"] = {"unavailable": pg_ours_status()}
    return out


def b2_line(out: dict[str, Any]) -> str:
    parts = []
    for name, r in out["results"].items():
        if "unavailable" in r:
            parts.append(f"{name} {r['unavailable']}")
            continue
        cpu = f"cpu/commit client {r['client_cpu_ms_per_commit']:.2f}ms"
        if r["server_cpu_ms_per_commit"]:
            cpu += f" server {r['server_cpu_ms_per_commit']:.2f}ms waits {r['waits']}"
        parts.append(f"{name} {r['commits_per_s']:,.0f} commits/s p99 {r['p99_ms']:.1f}ms "
                     f"errors {sum(r['errors'].values())}"
                     f"{'' if r['acked_equals_stored'] else ' stored!=acked'} {cpu}")
    return f"B2 8 writers {out['seconds']:.0f}s | " + " | ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--messages", type=int, help="B1 messages per subject")
    ap.add_argument("--seconds", type=float, help="B2 duration")
    ap.add_argument("--corpus", type=int, help="search corpus size (messages)")
    ap.add_argument("--repeats", type=int, help="search: timed runs per query (default 10)")
    ap.add_argument("--only", default="b1,b2,search", help="which parts, comma-separated")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--keep", type=Path, help="run the cluster in this directory and keep it"
                    " (stopped, not removed): the search corpus is loaded once and reused")
    args = ap.parse_args()
    n = args.messages or (2000 if args.quick else 10000)
    seconds = args.seconds or (5.0 if args.quick else 20.0)
    corpus = args.corpus or (50_000 if args.quick else 200_000)
    only = set(args.only.split(","))
    result: dict[str, Any] = {}
    server = BenchServer(args.keep).start()
    try:
        with tempfile.TemporaryDirectory(prefix="hermes-pgbench-") as tmp:
            if "b1" in only:
                result["b1"] = [b1_case(server, Path(tmp), b, n, args.quick) for b in (1, 100)]
                for case in result["b1"]:
                    print(b1_line(case), flush=True)
            if "b2" in only:
                result["b2"] = b2(server, Path(tmp), seconds)
                print(b2_line(result["b2"]), flush=True)
        if "search" in only:
            result["search"] = pg_search_bench.run(
                server, corpus, args.repeats or (5 if args.quick else 10))
    finally:
        server.destroy()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
