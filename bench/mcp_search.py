"""`hermes mcp serve`'s search beside `hermes sessions search`, same store, same run.

Builds a store of generated messages with bench/search.py's generator and
runs bench/search.py's query classes three ways:

- **MCP**: ``search_sessions`` called through the MCP SDK's stdio client
  on one running ``hermes mcp serve`` (the time is the client's: request,
  the server's store open and search, JSON answer, response);
- **CLI**: ``hermes sessions search QUERY --json`` as a new process each
  time (what a user or a script runs; the peer the goal names);
- **library**: ``SessionDB.search`` in this process (for reference: the
  floor under both).

Prints p50/p95 per class and the ratio MCP p95 / CLI p95 (goal: <= 2 for
every class), and checks that MCP and CLI return the same hits.

    python bench/mcp_search.py --messages 100000
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import anyio  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

import search as search_bench  # noqa: E402
from sessiondb import SessionDB  # noqa: E402

HERMES = "import sys; from hstate_cli.main import cli; cli(sys.argv[1:], prog_name='hermes')"
LIMIT = 20
GOAL = 2.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def cli_search(home: Path, q: str, sid: str | None) -> tuple[float, list[int]]:
    args = [sys.executable, "-c", HERMES, "--home", str(home), "sessions", "search", "--json",
            "--limit", str(LIMIT), *(["--session", sid] if sid else []), "--", q]
    t = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, check=True, cwd=ROOT)
    ms = (time.perf_counter() - t) * 1000
    return ms, [h["message_id"] for h in json.loads(done.stdout)["hits"]]


async def mcp_run(home: Path, queries: dict[str, list], repeats: int) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                   args=["-c", HERMES, "--home", str(home), "mcp", "serve"])
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            for name, items in queries.items():
                times, answers = [], []
                for item in items:
                    q, sid = item if isinstance(item, tuple) else (item, None)
                    args = {"query": q, "limit": LIMIT, **({"session_id": sid} if sid else {})}
                    for _ in range(repeats):
                        t = time.perf_counter()
                        res = await s.call_tool("search_sessions", args)
                        times.append((time.perf_counter() - t) * 1000)
                    assert not res.is_error, res.content[0].text
                    answers.append([h["message_id"] for h in
                                    json.loads(res.content[0].text)["hits"]])
                out[name] = {"times": times, "answers": answers}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3, help="CLI runs of each query")
    ap.add_argument("--mcp-repeats", type=int, default=10, help="MCP calls of each query")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hermes-mcp-bench-"))
    path = home / "state.db"
    gen = search_bench.Generator()
    try:
        print(f"building {args.messages:,} messages in {path}", file=sys.stderr)
        search_bench.build(path, args.messages, gen)
        queries = search_bench.query_set(path, gen)
        rows = compare(home, path, queries, args)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    report(rows, args)


def compare(home: Path, path: Path, queries: dict[str, list],
            args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per class: MCP (one server, all queries), then the CLI and the library."""
    mcp = anyio.run(mcp_run, home, queries, args.mcp_repeats)
    rows = []
    with SessionDB(path) as db:
        for name, items in queries.items():
            cli_times, lib_times, same = [], [], 0
            for item, mcp_answer in zip(items, mcp[name]["answers"]):
                q, sid = item if isinstance(item, tuple) else (item, None)
                for _ in range(args.repeats):
                    ms, answer = cli_search(home, q, sid)
                    cli_times.append(ms)
                same += answer == mcp_answer
                for _ in range(args.mcp_repeats):
                    t = time.perf_counter()
                    db.search(q, session_id=sid, limit=LIMIT)
                    lib_times.append((time.perf_counter() - t) * 1000)
            m = mcp[name]["times"]
            rows.append({"class": name, "mcp_p50_ms": round(pct(m, .5), 2),
                         "mcp_p95_ms": round(pct(m, .95), 2),
                         "cli_p50_ms": round(pct(cli_times, .5), 1),
                         "cli_p95_ms": round(pct(cli_times, .95), 1),
                         "library_p95_ms": round(pct(lib_times, .95), 2),
                         "ratio_p95": round(pct(m, .95) / pct(cli_times, .95), 3),
                         "same_hits": f"{same}/{len(items)}"})
    return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    cols = list(rows[0])
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r[c]) for c in cols))
    met = [r for r in rows if r["ratio_p95"] <= GOAL]
    print(f"\ngoal MCP p95 <= {GOAL:g}x `sessions search` p95: {len(met)}/{len(rows)} classes met"
          f" ({args.messages:,} messages; MCP mean p95 "
          f"{statistics.mean(r['mcp_p95_ms'] for r in rows):.1f} ms)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
