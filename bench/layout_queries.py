"""What the smaller search layout would cost per query, beside today's indexes.

Builds (or reuses) bench/search.py's store and its query set, then a
scratch file holding the candidate layout bench/layout_whatif.py sizes:
each message's indexed text compressed with zstd and a dictionary trained
on the store's texts, the word index with ``detail=none`` (which documents
hold a term, no positions; ``--word-detail full`` keeps it as it is), and a trigram index over the word index's
distinct terms instead of over every text. It times, per query class,
today's plain FTS5 answer (the 20 best with a snippet, as bench/search.py's
floor) against the candidate's answer to the same question:

- words and prefixes: the 20 best by bm25 from the ``detail=none`` index,
  each snippet made from its decompressed text;
- phrases: the AND of the phrase's words (ranked), each candidate's text
  decompressed and tokenized, kept when the words are adjacent, until 20;
- substrings and CJK: the terms holding the substring (trigram index over
  terms, each checked), the newest rows holding any of them from the word
  index, each verified against its text, until 20; more than
  ``--max-terms`` terms (or no word character in the query) falls back to
  the bounded scan today's short queries use, which is not timed here.

It also counts the answers: the candidate must find as many rows as
today's answer (both stop at 20), and "same rows" is the share of
today's rows the candidate returned too (ranked classes differ where bm25
without term frequencies orders differently; substrings are newest first
in both).

    python bench/layout_queries.py [--messages 50000] [--path P --reuse]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import apsw  # noqa: E402
import zstandard  # noqa: E402

import search as search_bench  # noqa: E402
from layout_whatif import DICT_BYTES, TRIGRAM, WORD, sizes  # noqa: E402
from sessiondb.index import search_index  # noqa: E402
from sessiondb.search import scan_snippet  # noqa: E402
from sessiondb.index.search_index import trigram_match  # noqa: E402
from sessiondb.search.search_query import fts_string  # noqa: E402

MAGIC = b"\x28\xb5\x2f\xfd"
SNIP = "snippet({t}, 0, '**', '**', '…', 16)"


class Candidate:
    """The scratch file: packed texts, word index without detail, term trigrams."""

    def __init__(self, root: Path, store: Path, detail: str) -> None:
        self.detail = detail
        self.conn = apsw.Connection(str(root / "candidate.db"))
        self.conn.execute("PRAGMA page_size=2048; PRAGMA journal_mode=OFF")
        self.conn.execute("ATTACH ? AS s", (str(store),))
        search_index.register_functions(self.conn)
        view = f"s.{search_index.TEXT_VIEW}"
        samples = [str(t).encode() for (t,) in self.conn.execute(
            f"SELECT text FROM {view} WHERE length(text) >= 32 ORDER BY random() LIMIT 4000")]
        trained = zstandard.train_dictionary(DICT_BYTES, samples)
        opts: dict[str, Any] = {"write_checksum": False, "write_content_size": False,
                                "write_dict_id": False}
        packer = zstandard.ZstdCompressor(level=3, dict_data=trained, **opts)
        self.unpacker = zstandard.ZstdDecompressor(dict_data=trained)
        self.conn.create_scalar_function("pack", lambda t: packer.compress(t.encode())[4:], 1)
        self.conn.execute(
            "CREATE TABLE texts(id INTEGER PRIMARY KEY, body BLOB);"
            f"INSERT INTO texts SELECT id, pack(text) FROM {view} WHERE text IS NOT NULL ORDER BY id;"
            f"CREATE VIRTUAL TABLE wx USING fts5(text, content='', {WORD}, detail={detail});"
            f"INSERT INTO wx(rowid, text) SELECT id, text FROM {view} WHERE text IS NOT NULL ORDER BY id;"
            "CREATE VIRTUAL TABLE voc USING fts5vocab(wx, 'row');"
            f"CREATE VIRTUAL TABLE vt USING fts5(term, {TRIGRAM});"
            "INSERT INTO vt(term) SELECT term FROM voc")
        self.tokenize = self.conn.fts5_tokenizer("unicode61", ["remove_diacritics", "2"])

    def text(self, mid: int) -> str:
        (body,) = self.conn.execute("SELECT body FROM texts WHERE id = ?", (mid,)).fetchone()
        return self.unpacker.decompress(MAGIC + body, max_output_size=1 << 22).decode()

    def words(self, text: str) -> list[str]:
        return self.tokenize(text.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                             include_offsets=False, include_colocated=False)

    def ranked(self, match: str, keep: Callable[[str], bool], terms: list[str]) -> list:
        hits = []
        for (mid,) in self.conn.execute("SELECT rowid FROM wx WHERE wx MATCH ? ORDER BY rank", (match,)):
            text = self.text(mid)
            if keep(text):
                hits.append((mid, scan_snippet(text, terms)))
                if len(hits) == 20:
                    break
        return hits

    def phrase(self, query: str) -> list:
        words = self.words(query.strip('"'))
        needle = f" {' '.join(words)} "
        return self.ranked(" AND ".join(fts_string(w) for w in words),
                           lambda t: needle in f" {' '.join(self.words(t))} ", words)

    def substring(self, query: str, max_terms: int) -> list | None:
        folded = query.casefold()
        # the longest run the word tokenizer keeps whole, folded as it folds terms
        piece = max(self.words(query), key=len, default="")
        if len(piece) < 3:
            return None
        terms = [t for (t,) in self.conn.execute(
            "SELECT term FROM vt WHERE vt MATCH ?", (trigram_match([piece]),)) if piece in t]
        if len(terms) > max_terms:
            return None
        if not terms:
            return []
        hits = []
        sql = "SELECT rowid FROM wx WHERE wx MATCH ? ORDER BY rowid DESC"
        for (mid,) in self.conn.execute(sql, (" OR ".join(fts_string(t) for t in terms),)):
            text = self.text(mid)
            if folded in text.casefold():
                hits.append((mid, scan_snippet(text, [query])))
                if len(hits) == 20:
                    break
        return hits

    def answer(self, kind: str, query: str, max_terms: int) -> list | None:
        if kind not in ("substring", "cjk") and self.detail == "full":
            return None  # the word index as it is: today's answer
        if kind == "phrase":
            return self.phrase(query)
        if kind in ("substring", "cjk"):
            return self.substring(query, max_terms)
        return self.ranked(fts_string(query.rstrip("*")) + ("*" if query.endswith("*") else ""),
                           lambda t: True, [query.rstrip("*")])


def today(conn: apsw.Connection, kind: str, query: str) -> list:
    if kind in ("substring", "cjk"):
        t = search_index.TRIGRAM_TABLE
        sql = (f"SELECT f.rowid, {SNIP.format(t=t)} FROM {t} AS f JOIN {search_index.TEXT_VIEW} AS v"
               f" ON v.id = f.rowid WHERE {t} MATCH ? AND hermes_contains(v.text, ?)"
               " ORDER BY f.rowid DESC LIMIT 20")
        return list(conn.execute(sql, (trigram_match([query]), query)))
    t = search_index.FTS_TABLE
    match = query if kind == "phrase" else (
        fts_string(query.rstrip("*")) + ("*" if query.endswith("*") else ""))
    return list(conn.execute(f"SELECT rowid, {SNIP.format(t=t)} FROM {t} WHERE {t} MATCH ?"
                             " ORDER BY rank LIMIT 20", (match,)))


def timed(fn: Callable[[], Any], repeats: int) -> tuple[list[float], Any]:
    got, laps = None, []
    for _ in range(repeats):
        started = time.perf_counter()
        got = fn()
        laps.append((time.perf_counter() - started) * 1000)
    return laps, got


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else values[0]


def run(store: Path, root: Path, queries: dict[str, list], repeats: int, max_terms: int,
        detail: str) -> None:
    started = time.perf_counter()
    cand = Candidate(root, store, detail)
    built = time.perf_counter() - started
    got = sizes(cand.conn)
    parts = {k: sum(v for n, v in got.items() if n.startswith(k)) for k in ("texts", "wx", "vt")}
    (n,) = cand.conn.execute("SELECT count(*) FROM s.messages").fetchone()
    print(f"{n:,} messages; candidate built in {built:.1f}s: packed texts {parts['texts'] / n:.1f},"
          f" word detail={detail} {parts['wx'] / n:.1f}, term trigrams {parts['vt'] / n:.1f} B/msg")
    conn = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    search_index.register_functions(conn)
    print("\n| class | today p50 | today p95 | candidate p50 | candidate p95 | x p95 | hits today / candidate | same rows |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in ("rare", "medium", "very common", "phrase", "prefix", "substring", "cjk"):
        ours, theirs, found, fallback, same = [], [], [0, 0], 0, 0
        for q in queries[kind]:
            laps, now = timed(lambda: today(conn, kind, q), repeats)
            ours += laps
            laps, new = timed(lambda: cand.answer(kind, q, max_terms), repeats)
            if new is None:
                fallback += 1
                continue
            theirs += laps
            found[0] += len(now)
            found[1] += len(new)
            same += len({r[0] for r in now} & {r[0] for r in new})
        if fallback == len(queries[kind]) and detail == "full" and kind not in ("substring", "cjk"):
            print(f"| {kind} | {statistics.median(ours):.2f} | {p95(ours):.2f} | unchanged |")
            continue
        note = f" ({fallback} to the scan)" if fallback else ""
        c50 = f"{statistics.median(theirs):.2f}" if theirs else "-"
        c95 = f"{p95(theirs):.2f}" if theirs else "-"
        ratio = f"{p95(theirs) / p95(ours):.2f}x" if theirs else "-"
        print(f"| {kind} | {statistics.median(ours):.2f} | {p95(ours):.2f} | {c50} | {c95} | {ratio}"
              f" | {found[0]} / {found[1]}{note} | {same / max(found[0], 1):.0%} |")
    conn.close()
    cand.conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--path", type=Path)
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-terms", type=int, default=500)
    ap.add_argument("--word-detail", choices=("none", "full"), default="none",
                    help="full: the word index keeps positions (only substrings change)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hermes-layout-q-") as tmp:
        path = args.path or Path(tmp) / "state.db"
        gen = search_bench.Generator()
        if not (args.reuse and path.exists()):
            search_bench.build(path, args.messages, gen)
        queries = search_bench.query_set(path, gen)
        run(path, Path(tmp), queries, args.repeats, args.max_terms, args.word_detail)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
