"""What the term table's upkeep costs batch appends, beside the peer.

Appends ``--messages`` messages of a corpus in batches of 100 through
`SessionDB.append_messages`, then lets the indexer catch up (timed with
the appends: the indexer's work is the store's work), in three stores per
round, each a fresh file: the store as it is (the word index and the term
table, m015); the same process with the indexer writing the word index
only (no batch's terms looked up or added: the term table stays empty);
and openai-agents' `SQLiteSession` with the same batches. Rounds
alternate the order. (Before m015 the middle line stood for the store
without its trigram index over every text.)

    python bench/append_index_share.py [--corpus real] [--messages 10000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import CORPORA, PROSE_SESSION, store_bytes  # noqa: E402
from sessiondb import SessionDB  # noqa: E402
from sessiondb.index import search_index  # noqa: E402
from subjects import OpenAIAgents  # noqa: E402

BATCH = 100


def ours(path: Path, msgs: list[dict[str, Any]], word_only: bool) -> float:
    unheld = search_index._unheld_terms
    if word_only:
        search_index._unheld_terms = lambda conn, texts: []  # type: ignore[assignment]
    try:
        with SessionDB(path) as db:
            sid = db.create_session(PROSE_SESSION, source="bench")
            started = time.perf_counter()  # after the file's creation, as the peer's
            for at in range(0, len(msgs), BATCH):
                db.append_messages(sid, msgs[at:at + BATCH])
            db.catch_up_index()
            elapsed = time.perf_counter() - started
            with db._read() as conn:
                (terms,) = conn.execute(f"SELECT count(*) FROM {search_index.TERMS_TABLE}"
                                        ).fetchone()
        assert (terms > 0) != word_only, "the variant did not take"
        return elapsed
    finally:
        search_index._unheld_terms = unheld


def peer(path: Path, msgs: list[dict[str, Any]]) -> float:
    p = OpenAIAgents()
    p.open(path, "NORMAL", "bench")
    started = time.perf_counter()
    for at in range(0, len(msgs), BATCH):
        p.append(msgs[at:at + BATCH])
    elapsed = time.perf_counter() - started
    p.close()
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", choices=sorted(CORPORA), default="real")
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    msgs = [CORPORA[args.corpus](i) for i in range(args.messages)]
    runs: dict[str, list[float]] = {"ours": [], "ours, word index only": [], "openai-agents": []}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="hermes-index-share-") as tmp:
        for r in range(args.rounds):
            order = list(runs)
            order = order[r % 3:] + order[:r % 3]
            for name in order:
                path = Path(tmp) / f"{r}-{name.replace(' ', '-').replace(',', '')}.db"
                fresh = [dict(m) for m in msgs]  # our append marks the dicts it stored
                t = (peer(path, fresh) if name == "openai-agents"
                     else ours(path, fresh, name != "ours"))
                runs[name].append(args.messages / t)
                sizes[name] = store_bytes(path)
    base = statistics.median(runs["openai-agents"])
    print(f"{args.corpus} corpus, {args.messages:,} messages in batches of {BATCH}, {args.rounds} rounds:"
          " msg/s (median, min-max), ratio to openai-agents, B/msg")
    for name, rates in runs.items():
        med = statistics.median(rates)
        print(f"  {name:<24} {med:9,.0f} ({min(rates):,.0f}-{max(rates):,.0f})  {med / base:5.2f}x"
              f"  {sizes[name] / args.messages:7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
