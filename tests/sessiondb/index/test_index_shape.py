"""The substring path's shape: the term table (m015, a trigram index over the
word index's terms, no positions, like the trigram index over every text
since m009) is a candidate filter that search verifies against the text, so
substring results stay exact."""
from __future__ import annotations

from pathlib import Path

import apsw
from hypothesis import given, settings, strategies as st

from sessiondb import SessionDB
from sessiondb.index import search_index
from sessiondb.index.search_index import trigram_match
from tests.helpers import legacy_index

OLD_TRIGRAM = ("CREATE VIRTUAL TABLE messages_trigram USING fts5(text,"
               " content='messages_search_text', content_rowid='id',"
               " tokenize='trigram remove_diacritics 1')")


def _as_m008(path: Path) -> None:
    """Turn a store back into what m008 left: a positional trigram index,
    filled and current, and no m009 (nor m015) in the ledger."""
    legacy_index.as_m014(path)
    conn = apsw.Connection(str(path))
    conn.execute("DROP TABLE messages_trigram")
    conn.execute(OLD_TRIGRAM)
    conn.execute("INSERT INTO messages_trigram(rowid, text) SELECT id, text"
                 " FROM messages_search_text")
    conn.execute("DELETE FROM migrations WHERE name = 'm009_index_shape'")
    conn.close()


def test_a_new_store_has_the_candidate_filter_shape(tmp_path: Path, open_store):
    db = open_store(tmp_path / "s.db")
    with db._read() as conn:
        assert search_index.has_current_shape(conn)
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_terms'"
                              ).fetchone()
        assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name LIKE 'messages_trigram%'"
                                ).fetchall()
    assert "detail=none" in sql and "columnsize=0" in sql


def test_m009_resets_an_old_index_and_search_stays_exact(tmp_path: Path, open_store):
    path = tmp_path / "s.db"
    with SessionDB(path) as db:
        db.create_session("s", source="t")
        want = db.append_message("s", {"role": "user", "content": "a reconnection storm"})
        db.append_message("s", {"role": "user", "content": "recon nection"})  # trigrams, no match
    _as_m008(path)
    db = open_store(path, background_index=False)
    assert db.pending_migrations() == []
    with db._read() as conn:
        assert search_index.has_current_shape(conn)
        assert search_index.watermark(conn) == 0  # the indexer rebuilds from here
    assert [h.message_id for h in db.search("econnectio")] == [want]  # the tail, exact
    db.catch_up_index()
    assert [(h.message_id, h.via) for h in db.search("econnectio")] == [(want, "terms")]
    assert db.search_health().ok


def test_a_candidate_holding_every_trigram_but_not_the_term_is_not_a_hit(tmp_path: Path,
                                                                       open_store):
    db = open_store(tmp_path / "s.db")
    db.create_session("s", source="t")
    decoy = db.append_message("s", {"role": "user", "content": "abcxbcd zz"})
    real = db.append_message("s", {"role": "user", "content": "zzabcdzz"})
    db.catch_up_index()
    with db._read() as conn:
        cands = [r[0] for r in conn.execute("SELECT term FROM messages_terms WHERE"
                                            " messages_terms MATCH ?",
                                            (trigram_match(["abcd"]),))]
        assert sorted(cands) == ["abcxbcd", "zzabcdzz"]  # both hold "abc" and "bcd" ...
        assert search_index.terms_holding(conn, "abcd", 10) == ["zzabcdzz"]  # ... one "abcd"
    for order in ("rank", "newest", "oldest"):
        assert [h.message_id for h in db.search("abcd", order=order)] == [real]
        assert [h.message_id for h in db.search("bcd", order=order)] == (
            [real, decoy] if order != "oldest" else [decoy, real])


ALPHABET = "abAB éÉçÇßİΣσς中文ü-"


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.text(alphabet=ALPHABET, max_size=14), min_size=1, max_size=8),
       term=st.text(alphabet=ALPHABET, min_size=3, max_size=5))
def test_verification_agrees_with_a_positional_trigram_index(texts, term):
    """``hermes_contains`` folds as the trigram tokenizer does: the verified
    candidates are exactly what a phrase query on the old shape matches."""
    conn = apsw.Connection(":memory:")
    search_index.register_functions(conn)
    conn.execute("CREATE VIRTUAL TABLE old USING fts5(text,"
                 " tokenize='trigram remove_diacritics 1')")
    conn.execute(search_index.fts_ddl(search_index.LEGACY_TRIGRAM_TABLE).replace(
        "messages_trigram", "new"))
    for i, text in enumerate(texts, 1):
        for table in ("old", "new"):
            conn.execute(f"INSERT INTO {table}(rowid, text) VALUES (?, ?)", (i, text))
    phrase = '"' + term.replace('"', '""') + '"'
    old = [r[0] for r in conn.execute("SELECT rowid FROM old WHERE old MATCH ?", (phrase,))]
    new = [r[0] for r in conn.execute(
        "SELECT rowid FROM new WHERE new MATCH ? AND hermes_contains(text, ?)",
        (trigram_match([term]), term))]
    assert new == old
    conn.close()


@settings(max_examples=80, deadline=None)
@given(texts=st.lists(st.text(alphabet=ALPHABET + " .", max_size=14), min_size=1, max_size=8),
       query=st.text(alphabet=ALPHABET + " .", min_size=3, max_size=6))
def test_the_terms_path_finds_what_a_positional_trigram_index_finds(texts, query):
    """A substring through the terms (the terms holding the query's longest
    word run, the word index's rows holding any of them, each verified)
    finds exactly the rows a phrase query on a positional trigram index
    matches; a query without a run of 3 word characters is the scan, which
    verifies every row."""
    from sessiondb.search.hits import TERM_CAP, substring_run
    from sessiondb.search.search_query import Plan
    conn = apsw.Connection(":memory:")
    search_index.register_functions(conn)
    conn.execute("CREATE VIRTUAL TABLE old USING fts5(text, tokenize='trigram remove_diacritics 1')")
    conn.execute(search_index.fts_ddl(search_index.FTS_TABLE))  # keeps its own text here
    conn.execute(search_index.fts_ddl(search_index.TERMS_TABLE))
    for i, text in enumerate(texts, 1):
        conn.execute("INSERT INTO old(rowid, text) VALUES (?, ?)", (i, text))
        search_index._put(conn, [(i, text)])
    term = query.strip()
    if len(term) < 3 or " " in term:
        return  # one term of 3+ characters (several are each verified alike)
    phrase = '"' + term.replace('"', '""') + '"'
    old = [r[0] for r in conn.execute("SELECT rowid FROM old WHERE old MATCH ?", (phrase,))]
    run = substring_run(conn, Plan("substring", verify=[term]))
    if run is None:
        new = [r[0] for r in conn.execute("SELECT rowid FROM messages_fts WHERE"
                                          " hermes_contains(text, ?)", (term,))]
    else:
        terms = search_index.terms_holding(conn, run, TERM_CAP) or []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        new = [] if not terms else [r[0] for r in conn.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
            " AND hermes_contains(text, ?) ORDER BY rowid", (match, term))]
    assert new == old
    conn.close()
