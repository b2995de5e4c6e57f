"""Where a commit-each append's server CPU goes, part by part.

Each case appends ``--commits`` bench messages to one session in a
server-side loop (a ``DO`` block, ``COMMIT`` after each call,
``synchronous_commit=off``) on a fresh database of this tree's schema,
changed as the case says; the serving backend's CPU (from /proc) over the
loop, per commit. No client, no round trip: what the server spends on the
call itself. Cases:

- ``ours``: `hermes_append_one` (this tree's), search column and indexes;
- ``ours-no-search``: the same without the search column and both indexes;
- ``ours-tsv-column-only``: the generated tsvector column, no GIN index;
- ``ours-no-trgm`` / ``ours-no-tsv``: one of the two search indexes;
- ``raw-no-search``: a bare INSERT of the row, no search (the floor);
- ``queue+indexer``: ``ours-no-search`` plus one queue row per message,
  then an indexer that moves the queue into a side table (id, tsvector,
  text) with both GIN indexes, ``--batch`` rows a transaction: the work an
  after-commit index would do, split into its commit part and its
  indexer part.

    python bench/pg_commit_parts.py --commits 3000 --rounds 3
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pg_subjects import BenchServer  # noqa: E402

LOREM = "lorem ipsum dolor sit amet " * 8  # bench/common.py's message text
TEXT = f"'message ' || i || ': ' || '{LOREM}'"
NO_SEARCH = ("DROP INDEX messages_search_tsv; DROP INDEX messages_search_trgm;"
             " ALTER TABLE messages DROP COLUMN search_tsv;")
CASES = {"ours": "", "ours-no-search": NO_SEARCH,
         "ours-tsv-column-only": "DROP INDEX messages_search_tsv; DROP INDEX messages_search_trgm;",
         "ours-no-trgm": "DROP INDEX messages_search_trgm;",
         "ours-no-tsv": "DROP INDEX messages_search_tsv; ALTER TABLE messages DROP COLUMN search_tsv;",
         "raw-no-search": NO_SEARCH, "queue+indexer": NO_SEARCH + """
  CREATE TABLE search_pending (id bigint PRIMARY KEY);
  CREATE TABLE message_search (id bigint PRIMARY KEY, tsv tsvector NOT NULL, body text);
  CREATE INDEX ON message_search USING gin (tsv);
  CREATE INDEX ON message_search USING gin (body gin_trgm_ops);"""}
APPEND = (f"PERFORM hermes_append_one('k', NULL, 1.0, 'message', md5(i::text), 'user', 'text',"
          f" {TEXT}, NULL, NULL, NULL, NULL, 1.0, NULL, '{{}}', 'fp', 0, 1000, true);")
RAW = ("INSERT INTO messages (session_id, uid, position, role, content_kind, content,"
       f" timestamp, meta, fingerprint) VALUES ('k', md5(i::text), i, 'user', 'text', {TEXT},"
       " 1.0, '{}', 'fp');")
QUEUE = "INSERT INTO search_pending SELECT max(id) FROM messages;"  # the row just inserted
INDEXER = """DO $$ DECLARE done int; BEGIN LOOP
  WITH b AS (DELETE FROM search_pending WHERE id IN (SELECT id FROM search_pending ORDER BY id
             LIMIT {batch} FOR UPDATE SKIP LOCKED) RETURNING id),
  ins AS (INSERT INTO message_search SELECT m.id,
            hermes_search_tsv(hermes_search_text(m.role, m.content_kind, m.content)),
            hermes_search_text(m.role, m.content_kind, m.content)
          FROM messages m JOIN b ON b.id = m.id RETURNING 1)
  SELECT count(*) INTO done FROM ins; COMMIT; EXIT WHEN done = 0; END LOOP; END $$"""


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_case(server: BenchServer, name: str, db: str, commits: int, batch: int) -> str:
    import psycopg
    with psycopg.connect(server.database(db), autocommit=True) as c:
        if CASES[name]:
            c.execute(CASES[name])
        c.execute("INSERT INTO sessions (id, source, started_at, updated_at)"
                  " VALUES ('k', 'bench', 1, 1)")
        c.execute("SET synchronous_commit = off")
        body = RAW if name == "raw-no-search" else APPEND + (QUEUE if "queue" in name else "")
        pid, t0 = c.info.backend_pid, cpu_s(c.info.backend_pid)
        c.execute(f"DO $$ BEGIN FOR i IN 1..{commits} LOOP {body} COMMIT; END LOOP; END $$")
        t1 = cpu_s(pid)
        line = f"{name}: {(t1 - t0) * 1e3 / commits:.3f} ms a commit"
        if "queue" in name:
            c.execute(INDEXER.format(batch=batch))
            line += f", indexer {(cpu_s(pid) - t1) * 1e3 / commits:.3f} ms a row ({batch}-row batches)"
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args()
    server = BenchServer().start()
    try:
        for rnd in range(args.rounds):
            for i, name in enumerate(args.cases.split(",")):
                line = run_case(server, name, f"parts{rnd}_{i}", args.commits, args.batch)
                print(f"round {rnd} {line} (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        server.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
