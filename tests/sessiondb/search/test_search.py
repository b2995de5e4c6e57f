"""Search: ranking, filters, phrases, prefixes, hostile input, CJK, states, sync."""
from __future__ import annotations

import json

import pytest

from sessiondb import InvalidInput, InvalidQuery, SessionDB, StorageError
from sessiondb.base.errors import Cause
from sessiondb.index.search_index import TEXT_CAP, TOOL_TEXT_CAP, terms_holding, word_tokens

# The contract's tests run on PostgreSQL too (sessiondb/pg/search.py); those
# that read FTS5 itself are marked.
pytestmark = pytest.mark.both_backends


def ids(hits):
    return [h.message_id for h in hits]


# How a substring hit is found: through the word index's terms on SQLite,
# through pg_trgm on PostgreSQL.
SUBSTRING_VIA = {"sqlite": "terms", "postgres": "trigram"}


def term_ids(db, substring):
    """What the term table and the word index themselves hold, once the
    indexer caught up: the rows holding a term that holds ``substring``'s
    longest word run, verified against the indexed text as search does."""
    db.catch_up_index()
    with db._read() as conn:
        run = max(word_tokens(conn, substring), key=len)
        terms = terms_holding(conn, run, 1000)
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        return [r[0] for r in conn.execute(
            "SELECT f.rowid FROM messages_fts AS f JOIN messages_search_text AS t"
            " ON t.id = f.rowid WHERE messages_fts MATCH ? AND hermes_contains(t.text, ?)",
            (match, substring))]


@pytest.fixture
def corpus(db: SessionDB) -> dict[str, int]:
    """Two sessions with known text; returns name -> message id."""
    db.create_session("trip", source="cli", title="Trip to Zürich")
    db.create_session("code", source="agent", title="Debugging")
    names = ["cafe", "dense", "weather", "blocks", "tool", "cjk", "punct", "old"]
    rows = [
        ("trip", {"role": "user", "content": "Is the café near the Zürich station?", "timestamp": 100}),
        ("trip", {"role": "assistant", "content": "postgres postgres postgres connection refused",
                  "timestamp": 200}),
        ("trip", {"role": "assistant", "content": "The weather in Zurich is rainy, said the postgres"
                  " forecast among many other words here", "timestamp": 300}),
        ("code", {"role": "assistant", "content": [
            {"type": "text", "text": "Looking at the traceback now"},
            {"type": "tool_use", "id": "t1", "name": "grep", "input": {"q": "invisibleinput"}}],
            "timestamp": 400}),
        ("code", {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1",
             "content": [{"type": "text", "text": "connection refused on port 5432"}]}],
            "timestamp": 500}),
        ("code", {"role": "user", "content": "東京タワーの近くのホテル", "timestamp": 600}),
        ("code", {"role": "user", "content": "use f(x) * 2 - y: see a.b NEAR c, 100% done_ok",
                  "timestamp": 700}),
        ("code", {"role": "assistant", "content": "connection pooling advice", "timestamp": 50}),
    ]
    found = {}
    for name, (sid, msg) in zip(names, rows):
        found[name] = db.append_message(sid, msg)
    return found


@pytest.mark.sqlite_only('FTS5 snippet() text exactly; ts_headline cuts its fragment at other points (docs/search.md, PostgreSQL)')
def test_words_fold_case_and_diacritics(db, corpus):
    assert set(ids(db.search("cafe"))) == {corpus["cafe"]}
    assert set(ids(db.search("ZURICH"))) == {corpus["cafe"], corpus["weather"]}
    hit = db.search("cafe")[0]
    assert hit.snippet == "Is the **café** near the Zürich station?"
    assert (hit.session_id, hit.role, hit.timestamp, hit.session_title, hit.via) == (
        "trip", "user", 100.0, "Trip to Zürich", "fts")


def test_rank_orders_by_relevance_and_order_modes(db, corpus):
    ranked = ids(db.search("postgres"))
    assert ranked == [corpus["dense"], corpus["weather"]]
    assert all(h.score is not None for h in db.search("postgres"))
    assert ids(db.search("connection", order="newest")) == [
        corpus["old"], corpus["tool"], corpus["dense"]]
    assert ids(db.search("connection", order="oldest")) == [
        corpus["dense"], corpus["tool"], corpus["old"]]
    assert ids(db.search("connection", order="oldest", limit=1, offset=1)) == [corpus["tool"]]


def test_filters(db, corpus):
    assert ids(db.search("connection", session_id="trip")) == [corpus["dense"]]
    assert set(ids(db.search("connection", role="user"))) == {corpus["tool"]}
    assert set(ids(db.search("connection", source="agent"))) == {corpus["tool"], corpus["old"]}
    assert set(ids(db.search("connection", since=150, until=500))) == {corpus["dense"]}
    assert db.search("connection", session_id="nope") == []


def test_phrase_and_prefix(db, corpus):
    assert set(ids(db.search('"connection refused"'))) == {corpus["dense"], corpus["tool"]}
    assert db.search('"refused connection"') == []
    assert set(ids(db.search("connect*"))) == {corpus["dense"], corpus["tool"], corpus["old"]}
    assert set(ids(db.search('"connection pool*"'))) == set()
    assert set(ids(db.search("pool*"))) == {corpus["old"]}


def test_block_text_and_tool_results_indexed_but_not_tool_inputs(db, corpus):
    assert ids(db.search("traceback")) == [corpus["blocks"]]
    assert ids(db.search("5432")) == [corpus["tool"]]
    assert db.search("invisibleinput") == []


def test_tool_output_is_indexed_up_to_the_cap(db, sid):
    head = "visiblehead " + "x" * (TOOL_TEXT_CAP - 30)
    rid = db.append_message(sid, {"role": "tool", "tool_call_id": "c",
                                  "content": head + " " * 40 + "beyondcap"})
    assert ids(db.search("visiblehead")) == [rid]
    assert db.search("beyondcap") == []


def test_other_messages_are_indexed_up_to_the_general_cap(db, sid):
    rid = db.append_message(sid, {"role": "user",
                                  "content": "starthere " + "y " * (TEXT_CAP // 2) + "tailword"})
    assert ids(db.search("starthere")) == [rid]
    assert db.search("tailword") == []
    assert db.get_messages(sid)[0]["content"].endswith("tailword")


@pytest.mark.parametrize("query", [
    "(", ")", "*", "NEAR", "NEAR(", "col:", ":", '"', '"unbalanced', "-", "-y", ".", "a.b",
    "AND", "OR NOT", "f(x)", "100%", "done_ok", "^", "{a b}", "+", "'", "\\", "%", "_",
    "x" * 2_000, "word " * 30, "\x00", "a\x00b", "   ", "é", "see a.b NEAR c",
])
def test_special_input_works_or_is_invalid_query(db, corpus, query):
    try:
        hits = db.search(query)
    except InvalidQuery as e:
        assert e.cause is Cause.INVALID_INPUT and str(e)
        return
    assert all(isinstance(h.message_id, int) for h in hits)


def test_special_characters_are_text_not_syntax(db, corpus):
    punct = corpus["punct"]
    assert ids(db.search("f(x)")) == [punct]          # phrase "f x"
    assert set(ids(db.search("NEAR"))) == {punct, corpus["cafe"]}  # a word, not an operator
    assert ids(db.search("see a.b NEAR c")) == [punct]
    assert ids(db.search("-done_ok")) == [punct]      # not negation
    assert ids(db.search("- y")) == [punct]           # "-" has no word: dropped
    assert ids(db.search("*")) == [punct]             # one char: substring scan
    assert ids(db.search("%")) == [punct]             # LIKE metacharacters escaped
    assert ids(db.search("done_ok")) == [punct]
    assert ids(db.search("_")) == [punct]            # one char, and a LIKE wildcard


def test_invalid_queries_are_typed(db, corpus):
    for bad in ["", "   ", '"', '""', "\ud800", "abc\udfff", "x" * 2_001, "w " * 40, None, 7]:
        with pytest.raises(InvalidQuery) as info:
            db.search(bad)
        assert isinstance(info.value, StorageError)
        assert info.value.cause is Cause.INVALID_INPUT


def test_bad_arguments_are_invalid_input(db, corpus):
    for kw in [{"limit": 0}, {"limit": 10_001}, {"offset": -1}, {"order": "random"},
               {"since": "yesterday"}, {"role": 3}, {"limit": True}]:
        with pytest.raises(InvalidInput):
            db.search("postgres", **kw)


def test_nul_is_a_separator(db, corpus):
    assert set(ids(db.search("connection\x00refused"))) == {corpus["dense"], corpus["tool"]}


@pytest.mark.sqlite_only('raw=True is FTS5 syntax here; on PostgreSQL it is tsquery syntax (tests/sessiondb/pg/test_pg_search.py)')
def test_raw_fts5_syntax_for_experts(db, corpus):
    assert set(ids(db.search("connection NOT refused", raw=True))) == {corpus["old"]}
    assert set(ids(db.search("NEAR(connection refused, 1)", raw=True))) == {
        corpus["dense"], corpus["tool"]}
    with pytest.raises(InvalidQuery, match="not a valid FTS5 query"):
        db.search("NEAR(", raw=True)
    with pytest.raises(InvalidQuery):
        db.search("nosuchcolumn:foo", raw=True)


def test_cjk_and_substrings(db, corpus, backend):
    cjk = corpus["cjk"]
    hits = db.search("東京タワー")
    assert ids(hits) == [cjk] and hits[0].via == SUBSTRING_VIA[backend]
    assert hits[0].snippet == "**東京タワー**の近くのホテル"
    short = db.search("東京")
    assert ids(short) == [cjk] and short[0].via == "scan"
    assert short[0].snippet == "**東京**タワーの近くのホテル"
    assert ids(db.search("ホテル")) == [cjk]
    assert ids(db.search("タワー 東京")) == [cjk]     # terms AND-ed, any order
    assert db.search("東京 タワーX") == []
    assert ids(db.search("x)")) == [corpus["punct"]]  # two characters: substring
    assert ids(db.search(")) ")) == []


def test_archived_and_rewound_rows(db, corpus):
    with db.atomic() as conn:
        conn.execute("UPDATE messages SET state = 'archived' WHERE id = ?", (corpus["dense"],))
        conn.execute("UPDATE messages SET state = 'rewound' WHERE id = ?", (corpus["tool"],))
    assert ids(db.search("refused")) == []
    hits = {h.message_id: h for h in db.search("refused", include_archived=True)}
    assert set(hits) == {corpus["dense"], corpus["tool"]}
    assert hits[corpus["dense"]].archived and hits[corpus["dense"]].state == "archived"
    assert hits[corpus["tool"]].state == "rewound" and not hits[corpus["tool"]].archived
    assert hits[corpus["dense"]].to_dict()["archived"] is True


@pytest.mark.sqlite_only('reads the FTS5 term table itself')
def test_triggers_follow_content_edits_deletes_and_cascades(db, corpus):
    with db.atomic() as conn:
        conn.execute("UPDATE messages SET content = 'entirely new words' WHERE id = ?",
                     (corpus["cafe"],))
    assert db.search("cafe") == []
    assert ids(db.search("entirely")) == [corpus["cafe"]]
    assert term_ids(db, "ntirel") == [corpus["cafe"]]     # the term table follows too
    assert term_ids(db, "café") == []
    with db.atomic() as conn:
        conn.execute("UPDATE messages SET content_kind = 'json', content = ? WHERE id = ?",
                     (json.dumps([{"type": "text", "text": "blockified"}]), corpus["cafe"]))
    assert db.search("entirely") == [] and ids(db.search("blockified")) == [corpus["cafe"]]
    with db.atomic() as conn:
        conn.execute("DELETE FROM messages WHERE id = ?", (corpus["weather"],))
    assert ids(db.search("rainy")) == []
    assert db.delete_session("code") == 5
    assert db.search("connection", include_archived=True) != []
    assert set(ids(db.search("connection"))) == {corpus["dense"]}
    assert db.search("東京タワー") == [] and db.search("traceback") == []
    health = db.search_health()
    assert health.ok, health


def test_rank_is_bounded_to_recent_window(db, sid):
    from sessiondb.search import hits as search_mod
    # An old message that mentions the common term many times, then more than
    # a window's worth of newer messages that mention it once.
    old = db.append_message(sid, {"role": "user", "content": "common " * 50})
    window = search_mod.RANK_WINDOW
    db.append_messages(sid, [{"role": "user", "content": f"common filler {i}"}
                             for i in range(window + 10)])
    ranked = db.search("common", limit=5)
    assert old not in ids(ranked)
    assert ids(db.search("common", order="oldest", limit=1)) == [old]
    top = db.search("common", limit=1, session_id=sid)[0]
    assert top.via == "fts" and top.score is not None


@pytest.mark.sqlite_only("search_health runs FTS5 checks; hermes doctor --store-url checks PostgreSQL's index")
def test_search_on_empty_store(db):
    assert db.search("anything") == []
    assert db.search("東京") == []
    assert db.search_health().ok


def test_migration_indexes_existing_rows(tmp_path):
    import apsw
    from sessiondb.engine import migrations
    path = tmp_path / "old.db"
    with SessionDB(path) as db:
        db.create_session("s", source="t")
        db.append_message("s", {"role": "user", "content": "preexisting words"})
    conn = apsw.Connection(str(path))
    for table in ("messages_fts", "messages_terms"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("DROP VIEW messages_search_text")
    for name in ("messages_search_log_ai", "messages_search_log_ad", "messages_search_log_au"):
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DROP TABLE search_changes")
    conn.execute("DELETE FROM state_meta WHERE key = 'fts_watermark'")
    conn.execute("DELETE FROM migrations WHERE name IN ('m004_search_index',"
                 " 'm006_index_watermark', 'm015_term_trigrams')")
    conn.close()
    with SessionDB(path) as db:
        assert db.pending_migrations() == []
        with db._read() as conn:
            assert "m004_search_index" in migrations.applied(conn)
        # served by the rebuilt indexes themselves, not by the fallback scan
        assert [h.via for h in db.search("preexisting")] == ["fts"]
        assert [h.via for h in db.search("reexistin")] == ["terms"]
        assert db.search_index_stale() is None and db.search_health().ok


def test_word_fragments_fall_back_to_substrings(db, corpus, backend):
    hits = db.search("onnectio")
    assert {h.message_id for h in hits} == {corpus["dense"], corpus["tool"], corpus["old"]}
    assert {h.via for h in hits} == {SUBSTRING_VIA[backend]}
    assert ids(db.search("onnectio", session_id="trip")) == [corpus["dense"]]
    assert set(ids(db.search('"tion refu"'))) == {corpus["dense"], corpus["tool"]}
    assert db.search("connection zzzqqq") == []      # every substring must match too


def test_any_text_is_a_result_or_invalid_query(open_store):
    from hypothesis import HealthCheck, given, settings, strategies as st
    db = open_store()
    db.create_session("h", source="t")
    db.append_messages("h", [{"role": "user", "content": "alpha (beta) \"gamma\" 東京タワー * - : ."}])

    @settings(max_examples=150, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=60)
           | st.text(alphabet='()*":-.^+ NEARORANDNOT{}abc東京', max_size=40))
    def check(text):
        for raw in (False, True):
            try:
                hits = db.search(text, raw=raw)
            except InvalidQuery:
                continue
            assert all(h.session_id == "h" for h in hits)

    check()


@pytest.mark.sqlite_only('FTS5 health checks')
def test_health_catches_an_index_out_of_step(db, corpus):
    from sessiondb.index.search_index import drop_triggers, set_watermark
    db.catch_up_index()
    with db.atomic() as conn:
        drop_triggers(conn)          # no marker: the kind of drift health must catch
        rid = db.append_message("code", {"role": "user", "content": "unindexed newcomer"})
        set_watermark(conn, rid)     # bookkeeping that claims the row is indexed
    health = db.search_health()
    assert not health.ok and not health.triggers_attached and health.stale is None
    # the word index lists its documents; the term table holds terms, not
    # messages: its check is FTS5's own, and its probe looks for a term
    (words,) = [i for i in health.indexes if i.name == "messages_fts"]
    assert words.integrity == "index out of step: 1 messages not indexed, 0 stale documents"
    assert words.probe.startswith("message ") and words.probe.endswith("missing from the index")
    (terms,) = [i for i in health.indexes if i.name == "messages_terms"]
    assert terms.integrity == "ok" and terms.probe.startswith("term ")
    assert health.to_dict()["ok"] is False
    db.rebuild_search_index()
    assert db.search_health().ok


def test_rank_when_the_best_matches_are_mostly_archived(db, sid):
    active = db.append_messages(sid, [{"role": "user", "content": f"topic plain {i}"}
                                      for i in range(3)])
    archived = db.append_messages(sid, [{"role": "user", "content": "topic topic topic"}
                                        for _ in range(30)])
    with db.atomic() as conn:
        conn.execute(f"UPDATE messages SET state = 'archived' WHERE id IN "
                     f"({','.join(map(str, archived))})")
    assert sorted(ids(db.search("topic", limit=5))) == active
    top = db.search("topic", limit=5, include_archived=True)
    assert len(top) == 5 and set(ids(top)) <= set(archived)
    assert all(h.snippet.startswith("**topic**") for h in top)


def test_words_the_index_holds_never_switch_to_substrings(db, sid, backend):
    """The substring fallback is for words the index holds nowhere; an empty
    page (past the last hit, or filtered out) must stay empty."""
    word = db.append_message(sid, {"role": "user", "content": "the connection dropped"})
    longer = db.append_message(sid, {"role": "assistant", "content": "reconnections happen"})
    assert ids(db.search("connection")) == [word]
    assert db.search("connection", offset=1) == []
    assert db.search("connection", role="assistant") == []
    assert db.search("connection", order="newest", role="assistant") == []
    assert ids(db.search("reconnection")) == [longer]            # the fallback itself
    assert [h.via for h in db.search("onnections")] == [SUBSTRING_VIA[backend]]
