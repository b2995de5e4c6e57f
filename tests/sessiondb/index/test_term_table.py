"""Substrings through the word index's terms (m015, docs/search.md): the
migration from the trigram index over every text keeps every substring
answer, the indexer adds later terms, the scan answers what the terms do
not (a common fragment, no word run) with verified rows, and a kill during
the migration leaves the old layout or the new one."""
from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from sessiondb import SessionDB
from sessiondb.index import search_index
from sessiondb.index.search_index import trigram_match
from sessiondb.search import hits as search_mod
from tests.helpers import legacy_index
from tests.helpers.damage import sql_read


ROWS = [
    {"role": "system", "content": "You are terse. Reconnection policies matter."},
    {"role": "user", "content": "Why does the reconnection storm happen at dawn?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]},
    {"role": "tool", "content": "log: ECONNRESET on port 5432 ::: retrying -> ok",
     "tool_call_id": "c1"},
    {"role": "user", "content": [{"type": "text", "text": "blocks with Zürich café"},
                                 {"type": "tool_result", "tool_use_id": "c1",
                                  "content": [{"type": "text", "text": "deadbeefcafe hash"}]}]},
    {"role": "assistant", "content": "東京タワーの近くのホテル, and the forecast"},
    {"role": "user", "content": "before\x00afterwords nul text"},
    {"role": "assistant", "content": "a.b.c -> x ::: É.É done_ok"},
    {"role": "user", "content": "the weather report: storms"},
    {"role": "assistant", "content": "reconnect later, storms pass"},
]
# substrings (a word the index holds nowhere runs as one), CJK, no word run
QUERIES = ["onnectio", "econn", "torm", "ürich", "afé", "adbeefca", "東京タワ", "タワー",
           "terword", "ECONNRESET", "forecas", "É.É", "é.é", ":::", "-> x", "a.b.c",
           "eather rep", "dited ver", "ailin", "ewound"]


def build(path: Path) -> dict[str, int]:
    """Every kind of row: tool calls and results, blocks, NUL text, CJK, a
    compaction (archived rows and a summary), a rewound row, an edited row
    and a deleted one the indexer has not applied (the change log), and
    rows above the watermark."""
    with SessionDB(path, background_index=False) as db:
        db.create_session("a", source="cli", title="Trip")
        db.create_session("b", source="agent", title="Code")
        ids = db.append_messages("a", [dict(m) for m in ROWS])
        more = db.append_messages("b", [{"role": "user", "content": f"trailing note {i}"}
                                        for i in range(6)])
        db.archive_and_compact("a", ids[1:3], {"role": "assistant",
                                               "content": "summary: reconnection storms"})
        with db.atomic() as conn:
            conn.execute("UPDATE messages SET state = 'rewound' WHERE id = ?", (more[0],))
            conn.execute("UPDATE messages SET content = 'rewound weather' WHERE id = ?",
                         (more[0],))
        db.catch_up_index()
        with db.atomic() as conn:  # logged: the index still holds the old text
            conn.execute("UPDATE messages SET content = 'edited version of the storm'"
                         " WHERE id = ?", (more[1],))
            conn.execute("DELETE FROM messages WHERE id = ?", (more[2],))
        db.append_messages("b", [{"role": "user", "content": "tailing reconnection, unindexed"}])
    return {"first": ids[0], "edited": more[1], "deleted": more[2]}


def answers(db: SessionDB) -> dict[str, list[int]]:
    out = {}
    for q in QUERIES:
        for archived in (False, True):
            hits = db.search(q, include_archived=archived, order="newest", limit=200)
            out[f"{q}/{archived}"] = [h.message_id for h in hits]
    return out


def trigram_answers(path: Path) -> dict[str, list[int]]:
    """What the search of the trigram index answered, computed from a store
    before m015 itself: candidates from the trigram index (every term of 3+
    characters), verified in the text, for the rows the index holds; the
    rows it does not hold yet (above the watermark, logged) by their text;
    and a scan of the text for terms shorter than a trigram."""
    conn = apsw.Connection(str(path))
    search_index.register_functions(conn)
    try:
        (w,) = conn.execute("SELECT CAST(value AS INTEGER) FROM state_meta"
                            " WHERE key = 'fts_watermark'").fetchone()
        logged = {r[0] for r in conn.execute("SELECT message_id FROM search_changes")}
        texts = dict(conn.execute(f"SELECT id, text FROM {search_index.TEXT_VIEW}"))
        states = dict(conn.execute("SELECT id, state FROM messages"))
        out = {}
        for q in QUERIES:
            pieces = q.split()
            contains = [r for r in texts if all(conn.execute(
                f"SELECT {search_index.CONTAINS_FUNCTION}(?, ?)", (texts[r], p)).fetchone()[0]
                for p in pieces)]
            long = [p for p in pieces if len(p) >= 3]
            held = set(texts) if not long else {r[0] for r in conn.execute(
                "SELECT rowid FROM messages_trigram WHERE messages_trigram MATCH ?",
                (trigram_match(long),))}  # (no term of 3: the scan read every row)
            found = sorted((r for r in contains if r in held or r > w or r in logged),
                           reverse=True)
            for archived in (False, True):
                out[f"{q}/{archived}"] = [r for r in found if archived or states[r] == "active"]
        return out
    finally:
        conn.close()


def test_the_migration_keeps_every_substring_answer(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build(path)
    legacy_index.as_m014(path)
    want = trigram_answers(path)
    assert want["onnectio/True"] and want["東京タワ/False"] and want[":::/False"]
    assert want["terword/False"] and want["É.É/False"] == want["é.é/False"] != []
    with SessionDB(path, background_index=False) as db:  # m015 runs
        assert db.pending_migrations() == []
        assert answers(db) == want  # the backlog still waits: the tail answers for it
        db.catch_up_index()
        assert answers(db) == want
        assert db.search_health().ok
    assert not sql_read(path, "SELECT name FROM sqlite_master WHERE name LIKE 'messages_trigram%'")
    conn = apsw.Connection(str(path))
    try:
        assert search_index.terms_missing(conn) == 0
        (n,) = conn.execute("SELECT count(*) FROM messages_terms").fetchone()
        (distinct,) = conn.execute("SELECT count(DISTINCT term) FROM messages_terms").fetchone()
        assert n == distinct > 0  # each term once
    finally:
        conn.close()


def test_a_term_of_a_later_batch_is_found(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "s.db", background_index=False) as db:
        db.create_session("s", source="t")
        db.append_messages("s", [{"role": "user", "content": "plain words only"}])
        db.catch_up_index()
        later = db.append_message("s", {"role": "user", "content": "a quuxvortex appears"})
        assert [(h.message_id, h.via) for h in db.search("uxvort")] == [(later, "terms")]
        db.catch_up_index()  # the batch adds its new term to the term table
        with db._read() as conn:
            assert search_index.terms_holding(conn, "uxvort", 10) == ["quuxvortex"]
        assert [(h.message_id, h.via) for h in db.search("uxvort")] == [(later, "terms")]
        edited = db.append_message("s", {"role": "user", "content": "nothing yet"})
        db.catch_up_index()
        with db.atomic() as conn:  # an edit brings a new term through the change log
            conn.execute("UPDATE messages SET content = 'zorbleflux now' WHERE id = ?",
                         (edited,))
        db.catch_up_index()
        assert [h.message_id for h in db.search("orbleflu")] == [edited]


def test_a_common_fragment_and_one_without_a_word_run_scan_exact_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with SessionDB(tmp_path / "s.db", background_index=False) as db:
        db.create_session("s", source="t")
        texts = ["testing", "resting place", "nesting birds", "a rest", "AZÉ.Kb one",
                 "aze.kb two", "azq.kb three", "x ::: y", ":: z"]
        ids = db.append_messages("s", [{"role": "user", "content": t} for t in texts])
        db.catch_up_index()
        assert {h.via for h in db.search("esting")} == {"terms"}
        monkeypatch.setattr(search_mod, "TERM_CAP", 2)  # 'esting' is in three terms
        hits = db.search("esting", order="oldest")
        assert [h.message_id for h in hits] == ids[:3] and {h.via for h in hits} == {"scan"}
        assert hits[0].snippet == "t**esting**"
        # no run of 3 word characters (words the index holds nowhere, then a
        # substring): the scan, verified as the terms path verifies, folded as the
        # trigram index folded (case and diacritics, which a LIKE would not)
        hits = db.search("zé.k", order="oldest")
        assert [h.message_id for h in hits] == ids[4:6] and {h.via for h in hits} == {"scan"}
        assert [h.message_id for h in db.search(":::")] == [ids[7]]


_KILLED_IN_M015 = """
import os, signal, sys
from sessiondb.index import search_index
real = search_index.terms_from_trigrams
def dying(conn):
    real(conn)  # the trigram index is dropped and the term table filled in the transaction ...
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the process dies before the commit
search_index.terms_from_trigrams = dying
from sessiondb import SessionDB
SessionDB(sys.argv[1], background_index=False)
"""


def test_a_kill_during_m015_leaves_the_old_layout_and_the_next_open_finishes(
        tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build(path)
    legacy_index.as_m014(path)
    want = trigram_answers(path)
    legacy_index.killed_inside(path, _KILLED_IN_M015, "m015_term_trigrams")
    assert trigram_answers(path) == want  # the old index, whole
    with SessionDB(path, background_index=False) as db:
        assert db.pending_migrations() == []
        db.catch_up_index()
        assert answers(db) == want and db.search_health().ok


def test_a_big_store_is_announced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  caplog: pytest.LogCaptureFixture) -> None:
    from sessiondb.engine import migrations
    path = tmp_path / "state.db"
    build(path)
    legacy_index.as_m014(path)
    monkeypatch.setattr(migrations, "_ANNOUNCE_ROWS", 5)
    with caplog.at_level("INFO", logger=migrations.__name__):
        SessionDB(path, background_index=False).close()
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "m015: replacing the trigram index of" in said and "terms in the term table" in said
    assert json.dumps(said)


def _term_rows(path: Path) -> list[str]:
    return [t for (t,) in sql_read(path, "SELECT term FROM messages_terms ORDER BY term")]


def test_each_term_is_added_once_whichever_handle_indexes(tmp_path: Path) -> None:
    """Each connection knows which terms the table holds and follows what
    other connections add; a rolled-back batch's terms are not known."""
    path = tmp_path / "s.db"
    a = SessionDB(path, background_index=False)
    b = SessionDB(path, background_index=False)
    try:
        a.create_session("s", source="t")
        a.append_messages("s", [{"role": "user", "content": "alphaword betaword"}])
        a.catch_up_index()
        b.append_messages("s", [{"role": "user", "content": "gammaword alphaword"}])
        b.catch_up_index()  # another connection adds 'gammaword'
        a.append_messages("s", [{"role": "user", "content": "gammaword deltaword"}])
        a.catch_up_index()
        assert _term_rows(path) == ["alphaword", "betaword", "deltaword", "gammaword"]
        with pytest.raises(RuntimeError), a.atomic() as conn:  # a batch that rolls back
            rid = a.append_message("s", {"role": "user", "content": "epsilonword"})
            search_index._put(conn, [(rid, "epsilonword")])
            raise RuntimeError("rolled back")
        a.append_messages("s", [{"role": "user", "content": "epsilonword"}])
        a.catch_up_index()
        assert _term_rows(path) == ["alphaword", "betaword", "deltaword", "epsilonword",
                                    "gammaword"]
        assert [h.message_id for h in a.search("psilonwor")] != []
    finally:
        a.close()
        b.close()
