"""Search benchmark: SessionDB.search against the raw FTS5 floor on the same file.

Builds a store of generated messages (words drawn from a Zipf distribution
over a synthetic vocabulary, a few tool outputs and some Japanese text),
then runs a fixed query set per class and prints p50/p95 latency of
``SessionDB.search`` and of the raw FTS5 floor, and their ratio. The search
goal is ours p95 <= 2x the floor's p95 for every class.

The floor (like-for-like) is the plainest raw-apsw FTS5 statement that
returns what our search returns for the class: the 20 best matches by
FTS5's own ``rank``, each with an FTS5 ``snippet()`` built the way ours is
(same markers, same 16-token window), from the index our plan uses::

    SELECT rowid, snippet(<index>, 0, '**', '**', '…', 16) FROM <index>
     WHERE <index> MATCH ? ORDER BY rank LIMIT 20

- ``<index>`` is ``messages_fts`` for every class, with the same FTS5
  expression our plan builds; for the substring and CJK classes that is
  the OR of the terms holding the query's longest word run (looked up in
  the term table as ours looks them up, m015), and the floor adds ``AND
  hermes_contains(text, ?)`` per term of 3+ characters, the plainest exact
  check (ours runs the same function); a run held by more than
  ``TERM_CAP`` terms, or none, is the bounded scan for both;
- ``in session`` writes the session filter the plain way: a join to
  ``messages`` with ``m.session_id = ?`` (FTS5 still streams in rank order);
- ``order=newest`` uses ``ORDER BY rowid DESC LIMIT 20`` (with snippet);
- ``short`` (1-2 characters, which no FTS5 index can serve) is the same
  bounded LIKE scan our search runs, as bare SQL returning id and text
  (our snippet is made from that text).

What the floor does not do and ours does: the stale-marker read, the state
filter (active rows only), the session title, role and timestamp of each
hit, bounding bm25 to the ``RANK_WINDOW`` most recent matches (which makes
ours cheaper than FTS5's unbounded ``ORDER BY rank`` for very common
terms), and building ``SearchHit`` objects.

Every query's answer is checked once against the floor's: the same number
of hits (every generated row is active, both stop at 20), so never empty
where the floor found something, and for ``order=newest`` and the scan
the very same rows. A wrong answer fails the goal whatever its speed.
"same rows as floor" is the share of our rows the floor returned too
(rank order: below 100% only when a term has more matches than the rank
window, or bm25 ties at the cut).

"bare match p95" is the previous floor, kept so nothing is hidden:
``SELECT rowid FROM <index> WHERE <index> MATCH ? LIMIT 20`` (no ranking,
no snippet; for ``in session`` joined to ``messages``; for ``short`` the
scan returning ids only). It is what finding any 20 matches costs.

    python bench/search.py --messages 50000
    python bench/search.py --messages 1000000 --path /tmp/bench1m.db --reuse --fallback
"""
from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sessiondb import SessionDB  # noqa: E402
from sessiondb.search import hits as search_mod  # noqa: E402
from sessiondb.index import search_index  # noqa: E402
from sessiondb.index.search_index import mark_stale, text_expr  # noqa: E402
from sessiondb.search.search_query import plan as make_plan  # noqa: E402

VOCAB = 50_000
ZIPF_S = 1.07
SESSION_SIZE = 200
BATCH = 5_000
REPEATS = 10
GOAL = 2.0
LIMIT = 20
KANA = "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワン"
SYLLABLES = [c + v for c in "bcdfghjklmnprstvz" for v in "aeiou"]


def vocabulary(rng: random.Random) -> list[str]:
    words: set[str] = set()
    ordered = []
    while len(ordered) < VOCAB:
        w = "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))
        if w not in words:
            words.add(w)
            ordered.append(w)
    return ordered


def zipf_cumulative() -> list[float]:
    return list(itertools.accumulate(1.0 / (r ** ZIPF_S) for r in range(1, VOCAB + 1)))


class Generator:
    """Deterministic message text: Zipf words, some tool output, some kana."""

    def __init__(self, seed: int = 42) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng)
        self.cum = zipf_cumulative()
        self.total = self.cum[-1]
        # Japanese text has no spaces: "words" of 2-4 kana run together.
        self.kana_words = ["".join(self.rng.choice(KANA) for _ in range(self.rng.randint(2, 4)))
                           for _ in range(300)]

    def text(self, n: int) -> str:
        rng, cum, total, words = self.rng, self.cum, self.total, self.words
        return " ".join(words[bisect.bisect_left(cum, rng.random() * total)] for _ in range(n))

    def message(self, i: int) -> dict:
        roll = self.rng.random()
        if roll < 0.05:
            return {"role": "tool", "tool_call_id": f"c{i}", "content": self.text(400)}
        if roll < 0.07:
            kana = "".join(self.rng.choice(self.kana_words) for _ in range(self.rng.randint(3, 8)))
            return {"role": "user", "content": f"{kana} {self.text(5)}"}
        n = max(3, int(self.rng.lognormvariate(3.0, 0.7)))
        return {"role": "user" if i % 2 else "assistant", "content": self.text(n),
                "timestamp": 1.7e9 + i}


def build(path: Path, n: int, gen: Generator) -> float:
    started = time.perf_counter()
    with SessionDB(path) as db:
        done = 0
        while done < n:
            sid = db.create_session(f"bench_{done // SESSION_SIZE:07d}", source="bench")
            count = min(SESSION_SIZE, n - done)
            db.append_messages(sid, [gen.message(done + k) for k in range(count)])
            done += count
            if done % 100_000 < SESSION_SIZE:
                print(f"  built {done:,} messages ({time.perf_counter() - started:.0f}s)",
                      file=sys.stderr)
        db.catch_up_index()  # the index is written after commits: timed searches use it whole
        db.checkpoint()
    return time.perf_counter() - started


def query_set(path: Path, gen: Generator) -> dict[str, list]:
    """Fixed queries per class, chosen from the vocabulary by frequency rank."""
    with SessionDB(path) as db:
        with db._read() as conn:
            (count,) = conn.execute("SELECT count(*) FROM messages").fetchone()
            texts = [r[0] for r in conn.execute(
                "SELECT content FROM messages WHERE role != 'tool' AND content_kind = 'text'"
                " ORDER BY id LIMIT 2000")]
    return queries_for(texts, count, gen)


def queries_for(texts: list[str], count: int, gen: Generator) -> dict[str, list]:
    """The query set from the store's first text messages and its size (so
    bench/postgres.py asks PostgreSQL the very same questions)."""
    rng = random.Random(7)
    w = gen.words
    longish = [t.split() for t in texts if len(t.split()) >= 4 and t.isascii()]
    phrases = []
    for words in rng.sample(longish, 10):
        at = rng.randrange(len(words) - 1)
        phrases.append(f'"{words[at]} {words[at + 1]}"')
    vocab = set(w)
    sessions = max(1, count // SESSION_SIZE)
    fragments = [x[1:6] for x in w[200:5000] if len(x) >= 7 and x[1:6] not in vocab]
    return {
        "rare": [w[i] for i in range(20_000, 50_000, 3_000)],
        "medium": [w[i] for i in range(200, 1_200, 100)],
        "very common": [w[i] for i in range(0, 10)],
        "phrase": phrases,
        "prefix": [f"{x[:4]}*" for x in w[50:60] if len(x) >= 4][:10],
        "substring": fragments[:10],
        "cjk": [k for k in gen.kana_words if len(k) >= 3][:10],
        "short": ["ba", "zu", "ko", "q", "é", "a", "ti", "x", "lo", "ne"],
        # very common and medium terms inside one session (an agent searching
        # its own session); floor: the same MATCH joined to messages
        "in session": [(t, f"bench_{rng.randrange(sessions):07d}")
                       for t in [x for x in w[:40] if len(x) >= 3][:5]
                       + [x for x in w[300:800] if len(x) >= 3][:5]],
    }


def index_table(kind: str) -> str:
    return "messages_fts"


def terms_plan(conn, p):
    """A substring plan with the match ours builds: the OR of the terms holding
    its longest word run; the scan plan when ours scans (no run, or too many terms)."""
    from dataclasses import replace
    from sessiondb.search.search_query import Plan, fts_string, like_pattern
    run = search_mod.substring_run(conn, p)
    terms = None if run is None else search_index.terms_holding(conn, run, search_mod.TERM_CAP)
    if not terms:
        return Plan("scan", likes=[like_pattern(p.terms[0])], terms=p.terms)
    return replace(p, match=" OR ".join(fts_string(t) for t in terms))


def scan_sql(columns: str) -> str:
    """The bounded LIKE scan (no index serves 1-2 characters), newest first."""
    return (f"SELECT {columns} FROM (SELECT m.id, {text_expr('m')} AS body FROM messages AS m"
            f" WHERE m.state = 'active' ORDER BY m.id DESC LIMIT {search_mod.SCAN_WINDOW})"
            f" WHERE body LIKE ? ESCAPE '\\' ORDER BY id DESC LIMIT {LIMIT}")


def verify_sql(verify: int) -> str:
    """The trigram index names candidates (detail=none, since m009); the
    plainest exact substring answer checks each term in the indexed text."""
    return "".join(f" AND {search_index.CONTAINS_FUNCTION}(text, ?)" for _ in range(verify))


def floor_sql(kind: str, order: str, in_session: bool, verify: int = 0) -> str:
    """The like-for-like floor: the plainest raw FTS5 query that returns what
    our search returns for the class (see the module docstring)."""
    if kind == "scan":
        return scan_sql("id, body")
    t = index_table(kind)
    check = verify_sql(verify)
    snippet = (f"snippet({t}, 0, '{search_mod.MARK_OPEN}', '{search_mod.MARK_CLOSE}',"
               f" '{search_mod.ELLIPSIS}', {search_mod.SNIPPET_TOKENS})")
    by = "rank" if order == "rank" else "rowid DESC"
    if in_session:
        return (f"SELECT f.rowid, {snippet} FROM {t} AS f JOIN messages AS m ON m.id = f.rowid"
                f" WHERE {t} MATCH ? AND m.session_id = ?{check} ORDER BY f.{by} LIMIT {LIMIT}")
    return (f"SELECT rowid, {snippet} FROM {t} WHERE {t} MATCH ?{check} ORDER BY {by}"
            f" LIMIT {LIMIT}")


def bare_sql(kind: str, in_session: bool, verify: int = 0) -> str:
    """The old floor, kept as a second column: a bare MATCH (no ranking, no
    snippet), or the bounded scan without its text for the short class."""
    if kind == "scan":
        return scan_sql("id")
    t = index_table(kind)
    check = verify_sql(verify)
    if in_session:
        return (f"SELECT f.rowid FROM {t} AS f JOIN messages AS m ON m.id = f.rowid"
                f" WHERE {t} MATCH ? AND m.session_id = ?{check} LIMIT {LIMIT}")
    return f"SELECT rowid FROM {t} WHERE {t} MATCH ?{check} LIMIT {LIMIT}"


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def check_answer(ours: list, floor: list, order: str) -> tuple[bool, float]:
    """Whether our answer is a real one: as many hits as the floor (every
    bench row is active, both stop at LIMIT), so non-empty where the floor
    is, and for storage order the very same rows. Also the share of our
    rows the floor returned too (rank order: 1.0 unless the term has more
    matches than the rank window, or bm25 ties at the cut)."""
    mine, theirs = [h.message_id for h in ours], [r[0] for r in floor]
    same = len(set(mine) & set(theirs)) / len(theirs) if theirs else 1.0
    ok = len(mine) == len(theirs) and (order == "rank" or mine == theirs)
    return ok, same


def run_class(db: SessionDB, queries: list, order: str, repeats: int,
              check: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"ours": [], "floor": [], "bare": [], "hits": [], "same": [],
                           "wrong": [], "checked": check}
    with db._read() as conn:
        for item in queries:
            q, sid = item if isinstance(item, tuple) else (item, None)
            p = make_plan(q)
            if p.alt is not None and not search_mod._any_match(conn, "messages_fts", p.match):
                p = p.alt
            if p.kind == "substring":
                p = terms_plan(conn, p)
            args = ((p.likes[0] if p.kind == "scan" else p.match,) + ((sid,) if sid else ())
                    + tuple(p.verify))
            fsql = floor_sql(p.kind, order, sid is not None, len(p.verify))
            bsql = bare_sql(p.kind, sid is not None, len(p.verify))
            kw = {"limit": LIMIT, "order": order, "session_id": sid}
            # one untimed run of each warms the cache and checks the answer
            ok, same = check_answer(db.search(q, **kw), conn.execute(fsql, args).fetchall(), order)
            conn.execute(bsql, args).fetchall()
            out["same"].append(same)
            if check and not ok:
                out["wrong"].append(q)
            for _ in range(repeats):
                out["ours"].append(timed(lambda: out["hits"].append(len(db.search(q, **kw)))))
                out["floor"].append(timed(lambda: conn.execute(fsql, args).fetchall()))
                out["bare"].append(timed(lambda: conn.execute(bsql, args).fetchall()))
    return out


def report(results: dict[str, dict[str, Any]]) -> list[dict]:
    rows = []
    for name, r in results.items():
        o50, o95, f50, f95 = (pct(r["ours"], .5), pct(r["ours"], .95), pct(r["floor"], .5),
                              pct(r["floor"], .95))
        rows.append({"class": name, "ours_p50_ms": round(o50, 3), "ours_p95_ms": round(o95, 3),
                     "floor_p50_ms": round(f50, 3), "floor_p95_ms": round(f95, 3),
                     "bare_p50_ms": round(pct(r["bare"], .5), 3),
                     "bare_p95_ms": round(pct(r["bare"], .95), 3),
                     "ratio_p50": round(o50 / max(f50, 1e-6), 2),
                     "ratio_p95": round(o95 / max(f95, 1e-6), 2),
                     "mean_hits": round(statistics.mean(r["hits"]), 1),
                     "same_as_floor": round(statistics.mean(r["same"]), 2),
                     "wrong": r["wrong"], "checked": r["checked"]})
    return rows


def print_table(rows: list[dict], title: str) -> None:
    print(f"\n{title}")
    head = ("class", "ours p50", "ours p95", "floor p50", "floor p95", "x p50", "x p95",
            "bare match p95", "hits", "same rows as floor", "answer")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        answer = ("not checked" if not r["checked"] else "ok" if not r["wrong"]
                  else f"WRONG for {len(r['wrong'])} queries")
        print(f"| {r['class']} | {r['ours_p50_ms']:.2f} ms | {r['ours_p95_ms']:.2f} ms | "
              f"{r['floor_p50_ms']:.2f} ms | {r['floor_p95_ms']:.2f} ms | {r['ratio_p50']} | "
              f"{r['ratio_p95']} | {r['bare_p95_ms']:.2f} ms | {r['mean_hits']} | "
              f"{r['same_as_floor']:.0%} | {answer} |")


def goal_line(rows: list[dict], order: str) -> str:
    """The search goal: p95 <= 2x the like-for-like floor, a real answer."""
    met = [r for r in rows if r["ratio_p95"] <= GOAL and not r["wrong"]]
    worst = max(rows, key=lambda r: r["ratio_p95"])
    missed = ", ".join(f"{r['class']} {r['ratio_p95']}x" + (" (wrong answer)" if r["wrong"] else "")
                       for r in rows if r not in met)
    return (f"goal p95 <= {GOAL:g}x floor, order={order}: {len(met)}/{len(rows)} classes met"
            + (f"; missed: {missed}" if missed else f" (worst {worst['class']} {worst['ratio_p95']}x)"))


def options() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--path", type=Path, help="store file (default: a temp dir)")
    ap.add_argument("--reuse", action="store_true", help="use an existing file at --path")
    ap.add_argument("--rebuild", action="store_true", help="also time rebuild_search_index()")
    ap.add_argument("--fallback", action="store_true",
                    help="also time search while the index is marked stale, then rebuild")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--repeats", type=int, default=REPEATS, help="timed runs of each query")
    ap.add_argument("--only", help="comma-separated query classes to run (default: all)")
    return ap.parse_args()


def healthy(db: SessionDB, queries: dict[str, list], repeats: int,
            out: dict[str, Any]) -> list[str]:
    """Both orders on the healthy index; returns the goal lines."""
    goals = []
    for order in ("rank", "newest"):
        rows = report({name: run_class(db, qs, order, repeats) for name, qs in queries.items()})
        print_table(rows, f"order={order}, limit={LIMIT}, {repeats} runs x 10 queries"
                    " per class; floor = like-for-like raw FTS5 (ranked, with snippet)")
        out[order] = rows
        goals.append(goal_line(rows, order))
    return goals


def while_stale(db: SessionDB, queries: dict[str, list], repeats: int,
                out: dict[str, Any]) -> None:
    with db.atomic() as conn:
        mark_stale(conn, "benchmark: fallback timing", None)
    classes = [n for n in ("rare", "medium", "very common", "phrase", "in session")
               if n in queries]
    rows = report({n: run_class(db, queries[n], "rank", repeats, check=False) for n in classes})
    print_table(rows, "while stale (fallback LIKE scan; floor is the healthy index's;"
                " answers not checked: LIKE is approximate)")
    out["fallback"] = rows


def main() -> None:
    args = options()
    path = args.path or Path(tempfile.mkdtemp(prefix="hermes-bench-")) / "state.db"
    gen = Generator()
    build_s = None
    if not (args.reuse and path.exists()):
        print(f"building {args.messages:,} messages in {path}", file=sys.stderr)
        build_s = build(path, args.messages, gen)
    size_mb = sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal")
                  if os.path.exists(f"{path}{s}")) / 1e6
    queries = query_set(path, gen)
    if args.only:
        queries = {k: v for k, v in queries.items() if k in args.only.split(",")}
    with SessionDB(path) as db:
        with db._read() as conn:
            (count,) = conn.execute("SELECT count(*) FROM messages").fetchone()
        print(f"{count:,} messages, {size_mb:.0f} MB"
              + (f", built in {build_s:.0f}s ({count / build_s:,.0f} msg/s)" if build_s else ""))
        out: dict[str, Any] = {"messages": count, "size_mb": round(size_mb), "build_s": build_s}
        goals = healthy(db, queries, args.repeats, out)
        if args.fallback:
            while_stale(db, queries, args.repeats, out)
        if args.fallback or args.rebuild:
            stats = db.rebuild_search_index()
            print(f"\nrebuild_search_index(): {stats['seconds']:.1f}s for {stats['messages']:,}")
            out["rebuild_s"] = stats["seconds"]
    print(f"\nsearch on {count:,} messages, like-for-like raw FTS5 floor:")
    for line in goals:
        print(line)
    out["goal"] = goals
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
