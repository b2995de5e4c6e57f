"""Where a PostgreSQL append's time goes: per append, round trips, client
CPU, server CPU (the serving backend's, from /proc) and wall time, for one
or more source trees in one run on one server, interleaved.

Each tree runs in its own process (its own `sessiondb`), appending to its
own database, which that tree's migrations create; round trips are the
Sync and Query messages in libpq's protocol trace of the pooled
connection. To compare with the statement path before migration p011:

    git archive d1a9af4 | tar -x -C /tmp/before
    python bench/pg_append_cost.py --tree before=/tmp/before --tree after=. --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pg_subjects import BenchServer, relaxed  # noqa: E402

CHILD = r'''
import json, re, sys, tempfile, time
tree, url, n, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, tree + "/bench"); sys.path.insert(0, tree)
from common import message
from sessiondb import SessionDB
db = SessionDB.open(url=url, home=tempfile.mkdtemp(), pool_size=1)
db.create_session("k", source="bench")
msgs = [message(i) for i in range(n + 50)]
for m in msgs[:50]:
    db.append_messages("k", [m])  # warm: pool, prepared statements, plpgsql plans
with db.core.read() as conn:
    raw = conn.raw
    (pid,) = raw.execute("SELECT pg_backend_pid()").fetchone()
def server_cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100
trace = open(tempfile.mktemp(), "w+")
raw.pgconn.trace(trace.fileno())
s0, c0, t0 = server_cpu(), time.process_time(), time.perf_counter()
for i in range(50, n + 50, batch):
    db.append_messages("k", msgs[i:i + batch])
wall, cpu, scpu = time.perf_counter() - t0, time.process_time() - c0, server_cpu() - s0
raw.pgconn.untrace()
trace.seek(0)
trips = len(re.findall(r"\tF\t\d+\t(?:Sync|Query)\b", trace.read()))
calls = n // batch
print(json.dumps({"msg_per_s": n / wall, "round_trips_per_call": trips / calls,
                  "client_cpu_ms_per_call": cpu * 1e3 / calls,
                  "server_cpu_ms_per_call": scpu * 1e3 / calls}))
db.close()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", help="NAME=PATH of a source tree (repeatable)")
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--cases", default="on:1,off:1,off:100",
                    help="synchronous_commit:batch pairs, comma-separated")
    args = ap.parse_args()
    trees = [t.split("=", 1) for t in (args.tree or [f"this={Path(__file__).parents[1]}"])]
    server = BenchServer().start()
    try:
        for rnd in range(args.rounds):
            for case in args.cases.split(","):
                mode, batch = case.split(":")
                for name, path in trees:
                    url = server.empty_database(f"c{rnd}{mode}{batch}{name}".lower())
                    url = relaxed(url) if mode == "off" else url
                    done = subprocess.run([sys.executable, "-c", CHILD, str(Path(path).resolve()),
                                           url, str(args.messages), batch],
                                          capture_output=True, text=True)
                    if done.returncode:
                        print(f"{name}: failed: {done.stderr.strip().splitlines()[-1]}")
                        continue
                    r = json.loads(done.stdout.strip().splitlines()[-1])
                    print(f"round {rnd} sc={mode} batch {batch} {name}: "
                          f"{r['msg_per_s']:,.0f} msg/s, {r['round_trips_per_call']:.1f} round "
                          f"trips, client {r['client_cpu_ms_per_call']:.2f} ms, server "
                          f"{r['server_cpu_ms_per_call']:.2f} ms CPU per call "
                          f"(load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        server.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
