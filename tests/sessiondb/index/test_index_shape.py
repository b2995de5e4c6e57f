"""The trigram index's shape (m009): no positions, a candidate filter that
search verifies against the text, so substring results stay exact."""
from __future__ import annotations

from pathlib import Path

import apsw
from hypothesis import given, settings, strategies as st

from sessiondb import SessionDB
from sessiondb.index import search_index
from sessiondb.search.search_query import trigram_match

OLD_TRIGRAM = ("CREATE VIRTUAL TABLE messages_trigram USING fts5(text,"
               " content='messages_search_text', content_rowid='id',"
               " tokenize='trigram remove_diacritics 1')")


def _as_m008(path: Path) -> None:
    """Turn a store back into what m008 left: a positional trigram index,
    filled and current, and no m009 in the ledger."""
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
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_trigram'"
                              ).fetchone()
    assert "detail=none" in sql


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
    assert [(h.message_id, h.via) for h in db.search("econnectio")] == [(want, "trigram")]
    assert db.search_health().ok


def test_a_candidate_holding_every_trigram_but_not_the_term_is_not_a_hit(tmp_path: Path,
                                                                       open_store):
    db = open_store(tmp_path / "s.db")
    db.create_session("s", source="t")
    decoy = db.append_message("s", {"role": "user", "content": "abcx xbcd"})
    real = db.append_message("s", {"role": "user", "content": "zzabcdzz"})
    db.catch_up_index()
    with db._read() as conn:
        cands = [r[0] for r in conn.execute("SELECT rowid FROM messages_trigram WHERE"
                                            " messages_trigram MATCH ?",
                                            (trigram_match(["abcd"]),))]
    assert sorted(cands) == [decoy, real]  # both hold "abc" and "bcd"
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
    conn.execute(search_index.fts_ddl(search_index.TRIGRAM_TABLE).replace(
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
