"""What candidate storage layouts would take, measured on a real store.

Builds a store of a corpus the way bench/size_breakdown.py does, and
openai-agents' `SQLiteSession` on the same messages in the same run (with
``--corpus hermes``: a Hermes Agent file imported as bench/hermes_agent_size.py
does, its messages holding the prose corpus's text, or real text with
``--corpus hermes-real``; that file is the reference). Then it copies the
store's rows and its indexed text into scratch files laid out another way
and prints, per
message (``dbstat`` pages): each candidate's rows (table and its indexes),
word index and trigram index, and whole-store totals for combinations of
them (the store's other b-trees and free pages counted as they are) with
their ratio to the reference, and how long each candidate took to build
from the store (one statement, microseconds per message: the rows' copy
with its packing, an index's whole build; the vocabulary's time includes
the word index it reads). Nothing here is a layout the store uses.

Rows (the ``messages`` table, its unique ``(session, uid)`` index and
``messages_in_order``, every row copied by id):

- ``current``: as the store has them;
- ``int``: the session as an integer reference in the row and both indexes;
- ``int-nofp``: the same without the 12-byte fingerprint column;
- ``+zlib`` / ``+zstd`` / ``+zstd-dict``: content and tool calls of 32 bytes
  or more stored compressed (a BLOB, kept only when smaller): zlib level 6,
  zstd level 3 without a dictionary, zstd level 3 with a 16 KiB dictionary
  trained on the store's oldest fifth of texts (its bytes counted once in
  the total); ``--corpus real`` (bench/real_text.py) is the one whose texts
  pack as real text does;
- ``keyed``: ``WITHOUT ROWID`` on (session, position, id), with a unique
  index on id (what the search indexes and the change log address rows by)
  and the unique (session, uid) index, instead of a rowid table plus
  ``messages_in_order``.

Indexes (contentless FTS5 tables fed the store's indexed text):

- word index: as now (positions), ``detail=column``, ``detail=none``,
  ``detail=none, columnsize=0``;
- trigram index: as now; only the tokens the word tokenizer cannot make
  findable as words (CJK runs, tokens with inner punctuation: paths,
  identifiers, versions); only the first 1 KiB of each text; and
  ``vocabulary``: a trigram index over the word index's distinct terms
  (``fts5vocab``), which finds the terms holding a substring, the word
  index then finds their rows and every candidate is verified against the
  text (bench/layout_queries.py measures that path).

    python bench/layout_whatif.py --corpus prose|real|b1|scale|hermes|hermes-real [--messages N]
    python bench/layout_whatif.py --store STORE.db     # no reference
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import apsw  # noqa: E402

from common import CORPORA, store_bytes  # noqa: E402
from sessiondb.index import search_index  # noqa: E402

_COLS = ("uid, position, role, content_kind, {content}, {tool_calls}, tool_call_id, tool_name,"
         " finish_reason, timestamp, token_count, meta, {fp}state, compaction_id, kind")
ROW_TREES = ("messages", "sqlite_autoindex_messages_1", "messages_in_order")
WORD = f"tokenize='{search_index.TOKENIZERS[search_index.FTS_TABLE]}'"
TRIGRAM = f"tokenize='{search_index.TOKENIZERS[search_index.TRIGRAM_TABLE]}', detail=none, columnsize=0"
PACK_MIN = 32
DICT_BYTES = 16_384


@dataclass(frozen=True)
class Rows:
    name: str
    int_ref: bool = True
    fp: bool = False
    codec: str = ""
    keyed: bool = False
    page: int = 2048


ROWS = (Rows("current", int_ref=False, fp=True),
        Rows("current+zlib", int_ref=False, fp=True, codec="zlib"),
        Rows("current+zstd-dict", int_ref=False, fp=True, codec="zstd-dict"),
        Rows("int", fp=True), Rows("int-nofp"),
        Rows("int-nofp+zlib", codec="zlib"), Rows("int-nofp+zstd", codec="zstd"),
        Rows("int-nofp+zstd-dict", codec="zstd-dict"),
        Rows("int-nofp+zstd-dict @4K", codec="zstd-dict", page=4096),
        Rows("int-nofp+zstd-dict @8K", codec="zstd-dict", page=8192),
        Rows("keyed int-nofp+zstd-dict", codec="zstd-dict", keyed=True),
        Rows("keyed int-nofp", keyed=True))

_SPLIT_INSIDE = re.compile(r"\w[^\w\s]+\w")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def pieces(text: str | None) -> str | None:
    """The tokens of ``text`` the word tokenizer cannot make findable as
    words: CJK runs and tokens with punctuation inside (paths, identifiers,
    versions, URLs), one a line; None when there is none."""
    if not text:
        return None
    keep = [t for t in text.split() if _SPLIT_INSIDE.search(t) or _CJK.search(t)]
    return "\n".join(keep) or None


def head(text: str | None, chars: int = 1024) -> str | None:
    return text[:chars] if text else None


WORD_INDEXES = (("as now (positions)", WORD, None), ("detail=column", WORD + ", detail=column", None),
                ("detail=none", WORD + ", detail=none", None),
                ("detail=none, columnsize=0", WORD + ", detail=none, columnsize=0", None))
TRIGRAM_INDEXES = (("as now", TRIGRAM, None), ("pieces only", TRIGRAM, pieces),
                   ("first 1 KiB", TRIGRAM, head))


class Codec:
    """Packs text columns for the ``+zlib``/``+zstd`` row candidates."""

    def __init__(self, kind: str, samples: list[bytes]) -> None:
        self.kind, self.dict_bytes = kind, 0
        self._zstd: Any = None
        if kind.startswith("zstd"):
            import zstandard
            params: dict[str, Any] = {"level": 3, "write_checksum": False,
                                      "write_content_size": False, "write_dict_id": False}
            if kind == "zstd-dict":
                trained = zstandard.train_dictionary(DICT_BYTES, samples)
                self.dict_bytes = len(trained.as_bytes())
                params["dict_data"] = trained
            self._zstd = zstandard.ZstdCompressor(**params)

    def pack(self, value: object) -> object:
        if not isinstance(value, str) or len(value) < PACK_MIN:
            return value
        raw = value.encode()
        packed = (self._zstd.compress(raw) if self._zstd else zlib.compress(raw, 6))
        if self._zstd:
            packed = packed[4:]  # the frame's magic number: every value has it
        return packed if len(packed) < len(raw) else value


def scratch(root: Path, name: str, page_size: int, store: Path) -> apsw.Connection:
    path = root / f"{re.sub(r'[^a-z0-9]+', '-', name)}-{page_size}.db"
    path.unlink(missing_ok=True)
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA page_size={page_size}; PRAGMA journal_mode=OFF")
    conn.execute("ATTACH ? AS s", (str(store),))
    return conn


def sizes(conn: apsw.Connection) -> dict[str, int]:
    return {name: size for name, size in conn.execute(
        "SELECT name, sum(pgsize) FROM dbstat('main') GROUP BY name") if size}


def samples(store: Path, limit: int = 4000) -> list[bytes]:
    """The dictionary's training texts: the oldest fifth of the store (at
    most ``limit``), as a dictionary trained once then packs later rows."""
    conn = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    (n,) = conn.execute("SELECT count(*) FROM messages").fetchone()
    got = [str(t).encode() for (t,) in conn.execute(
        "SELECT content FROM messages WHERE length(content) >= ? ORDER BY id LIMIT ?",
        (PACK_MIN, min(limit, max(n // 5, 200))))]
    conn.close()
    return got


def row_layout(conn: apsw.Connection, r: Rows, codec: Codec | None) -> None:
    sid = "INTEGER" if r.int_ref else "TEXT"
    cols = _COLS.format(fp="fingerprint, " if r.fp else "", content="{content}",
                        tool_calls="{tool_calls}")
    if r.keyed:
        conn.execute(f"CREATE TABLE messages(id INTEGER NOT NULL, session_id {sid},"
                     f" {cols.format(content='content', tool_calls='tool_calls')},"
                     " PRIMARY KEY (session_id, position, id), UNIQUE (session_id, uid))"
                     " WITHOUT ROWID; CREATE UNIQUE INDEX messages_in_order ON messages(id)")
    else:
        conn.execute(f"CREATE TABLE messages(id INTEGER PRIMARY KEY, session_id {sid},"
                     f" {cols.format(content='content', tool_calls='tool_calls')},"
                     " UNIQUE (session_id, uid));"
                     "CREATE INDEX messages_in_order ON messages(session_id, position, id)")
    if codec:
        conn.create_scalar_function("pack", codec.pack, 1, deterministic=True)
    packed = cols.format(content="pack(m.content)" if codec else "m.content",
                         tool_calls="pack(m.tool_calls)" if codec else "m.tool_calls")
    ref = ("(SELECT rowid FROM s.sessions AS x WHERE x.id = m.session_id)"
           if r.int_ref else "m.session_id")
    conn.execute(f"INSERT INTO messages SELECT m.id, {ref}, {packed} FROM s.messages AS m ORDER BY m.id")


def index_layout(conn: apsw.Connection, options: str, feed: Callable | None) -> None:
    conn.execute(f"CREATE VIRTUAL TABLE ix USING fts5(text, content='', {options})")
    text = "text"
    if feed:
        conn.create_scalar_function("feed", feed, 1, deterministic=True)
        text = "feed(text)"
    conn.execute(f"INSERT INTO ix(rowid, text) SELECT id, {text} FROM s.{search_index.TEXT_VIEW}"
                 f" WHERE {text} IS NOT NULL ORDER BY id")


def vocabulary_layout(conn: apsw.Connection) -> int:
    """A trigram index over the word index's distinct terms: bytes of the
    term table and its trigram index (the word index built first, not counted)."""
    index_layout(conn, WORD + ", detail=none", None)
    before = sum(sizes(conn).values())
    conn.execute("CREATE VIRTUAL TABLE voc USING fts5vocab(ix, 'row');"
                 f"CREATE VIRTUAL TABLE vt USING fts5(term, {TRIGRAM});"
                 "INSERT INTO vt(term) SELECT term FROM voc")
    return sum(sizes(conn).values()) - before


TIMES: dict[str, float] = {}  # seconds each candidate took to build from the store


def measure_rows(root: Path, store: Path) -> dict[str, float]:
    texts = samples(store)
    out: dict[str, float] = {}
    for r in ROWS:
        codec = Codec(r.codec, texts) if r.codec else None
        conn = scratch(root, r.name, r.page, store)
        started = time.perf_counter()
        row_layout(conn, r, codec)
        TIMES[r.name] = time.perf_counter() - started
        got = sizes(conn)
        out[r.name] = sum(v for k, v in got.items() if k != "sqlite_schema") + (
            codec.dict_bytes if codec else 0)
        conn.close()
    return out


def measure_indexes(root: Path, store: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for group, table in (("word", WORD_INDEXES), ("trigram", TRIGRAM_INDEXES)):
        for name, options, feed in table:
            conn = scratch(root, "ix", 2048, store)
            started = time.perf_counter()
            index_layout(conn, options, feed)
            TIMES[f"{group} {name}"] = time.perf_counter() - started
            out[f"{group} {name}"] = sum(v for k, v in sizes(conn).items() if k != "sqlite_schema")
            conn.close()
    conn = scratch(root, "voc", 2048, store)
    started = time.perf_counter()
    out["trigram vocabulary only"] = vocabulary_layout(conn)
    TIMES["trigram vocabulary only"] = time.perf_counter() - started
    conn.close()
    return out


def store_parts(store: Path) -> tuple[int, dict[str, int]]:
    """The file's bytes and its b-trees grouped as rows / word / trigram / other."""
    conn = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    groups = {"rows": 0, "word": 0, "trigram": 0, "other": 0}
    for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
        key = ("rows" if name in ROW_TREES else "word" if name.startswith(search_index.FTS_TABLE)
               else "trigram" if name.startswith(search_index.TRIGRAM_TABLE) else "other")
        groups[key] += size or 0
    conn.close()
    total = store_bytes(store)
    groups["other"] += total - sum(groups.values())  # free pages, pointer maps
    return total, groups


W, WN, T, V = ("word as now (positions)", "word detail=none", "trigram as now",
              "trigram vocabulary only")
COMBOS = (
    ("today", "current", W, T),
    ("A: substrings through the term vocabulary", "current", W, V),
    ("A + text zlib", "current+zlib", W, V),
    ("A + text zstd-dict", "current+zstd-dict", W, V),
    ("A + int ref, no fingerprint", "int-nofp", W, V),
    ("A + int ref, no fingerprint + text zlib", "int-nofp+zlib", W, V),
    ("A + int ref, no fingerprint + text zstd-dict", "int-nofp+zstd-dict", W, V),
    ("  same, word detail=none", "int-nofp+zstd-dict", WN, V),
    ("  same, rows at 4 KiB pages", "int-nofp+zstd-dict @4K", W, V),
    ("  same, keyed table", "keyed int-nofp+zstd-dict", W, V),
    ("A + text zstd-dict + word detail=none", "current+zstd-dict", WN, V),
    ("int ref, no fingerprint (trigram as now)", "int-nofp", W, T),
    ("int ref, no fingerprint + zstd-dict + word detail=none (trigram as now)",
     "int-nofp+zstd-dict", WN, T),
    ("  same, trigram of the first 1 KiB", "int-nofp+zstd-dict", WN, "trigram first 1 KiB"),
    ("  same, trigram of pieces + vocabulary", "int-nofp+zstd-dict", WN,
     "trigram pieces only + trigram vocabulary only"),
)


def build(corpus: str, n: int, root: Path) -> tuple[Path, int, str]:
    """Our store of ``n`` messages and the reference's bytes on the same ones."""
    if corpus.startswith("hermes"):
        from hermes_agent_size import run
        got = run(n, "real" if corpus == "hermes-real" else "prose", root)
        return root / "ours.db", int(got["theirs"]), "the Hermes Agent file"
    from size_breakdown import build as build_store
    store = root / "store.db"
    build_store(store, corpus, n, 100)
    return store, peer_bytes(root / "peer.db", corpus, n), "openai-agents SQLiteSession"


def peer_bytes(path: Path, corpus: str, n: int) -> int:
    """openai-agents' `SQLiteSession` of the same messages, in batches of 100."""
    from subjects import OpenAIAgents
    peer = OpenAIAgents()
    peer.open(path, "NORMAL", "bench")
    for at in range(0, n, 100):
        peer.append([CORPORA[corpus](i) for i in range(at, min(n, at + 100))])
    peer.close()
    return store_bytes(path)


def combo_total(other: int, parts: dict[str, float], keys: tuple[str, str, str]) -> tuple[float, ...]:
    rows, word, trigram = keys
    got = (parts[rows], parts[word], sum(parts[k] for k in trigram.split(" + ")))
    return (*got, other + sum(got))


def report(n: int, total: int, groups: dict[str, int], parts: dict[str, float],
           reference: tuple[int, str] | None) -> None:
    per = lambda v: f"{v / n:,.1f}"  # noqa: E731
    print(f"store file {per(total)} B/msg: rows {per(groups['rows'])}, word {per(groups['word'])},"
          f" trigram {per(groups['trigram'])}, other (sessions, change log, free pages)"
          f" {per(groups['other'])}")
    if reference:
        print(f"reference: {reference[1]} {per(reference[0])} B/msg")
    print("\n| component | B/msg | built in, us/msg |\n|---|---|---|")
    for name, size in parts.items():
        print(f"| {name} | {per(size)} | {TIMES.get(name, 0) * 1e6 / n:.1f} |")
    ref = f" | / {reference[1]}" if reference else ""
    print(f"\n| combination | rows | word | trigram | store{ref} |\n|---|---|---|---|---|"
          + ("---|" if reference else ""))
    for label, *keys in COMBOS:
        rows, word, trigram, whole = combo_total(groups["other"], parts, tuple(keys))  # type: ignore[arg-type]
        ratio = f" | {whole / reference[0]:.2f}x" if reference else ""
        print(f"| {label} | {per(rows)} | {per(word)} | {per(trigram)} | {per(whole)}{ratio} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", choices=(*sorted(CORPORA), "hermes", "hermes-real"), default="prose")
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--store", help="measure this store instead (no reference)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hermes-whatif-") as tmp:
        root = Path(tmp)
        if args.store:
            store, reference = Path(args.store), None
        else:
            store, ref_bytes, ref_name = build(args.corpus, args.messages, root)
            reference = (ref_bytes, ref_name)
        probe = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
        (n,) = probe.execute("SELECT count(*) FROM messages").fetchone()
        probe.close()
        total, groups = store_parts(store)
        parts = {**{f"rows {k}": v for k, v in measure_rows(root, store).items()},
                 **measure_indexes(root, store)}
        parts = {k.removeprefix("rows "): v for k, v in parts.items()}
        print(f"{args.store or args.corpus}: {n:,} messages, bytes per message (dbstat pages)")
        report(n, total, groups, parts, reference)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
