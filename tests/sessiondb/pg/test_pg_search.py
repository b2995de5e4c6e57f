"""PostgreSQL search against SQLite's on one corpus: same hits, same order
where the contract fixes it (newest/oldest); hostile text never errors."""
from __future__ import annotations

import json

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from sessiondb.rows.codec import uid_text
from sessiondb import InvalidQuery, SessionDB
from sessiondb.pg import search as pg_search
from sessiondb.pg.transfer import PgSide, SqliteSide, transfer
from sessiondb.search.hits import Filters

ROWS = [
    ("trip", "user", "Is the café near the Zürich station?", 100),
    ("trip", "assistant", "postgres postgres postgres connection refused", 200),
    ("trip", "assistant", "The weather in Zurich is rainy, said the postgres forecast", 300),
    ("code", "assistant", [{"type": "text", "text": "Looking at the traceback now"},
                           {"type": "tool_use", "id": "t1", "name": "grep",
                            "input": {"q": "invisibleinput"}}], 400),
    ("code", "user", [{"type": "tool_result", "tool_use_id": "t1",
                       "content": [{"type": "text", "text": "connection refused on port 5432"}]}],
     500),
    ("code", "user", "東京タワーの近くのホテル", 600),
    ("code", "user", "use f(x) * 2 - y: see NEAR c, 100% done", 700),
    ("code", "assistant", "connection pooling advice", 50),
    ("code", "tool", "deployment log: deploy finished, deploying again", 800),
]

QUERIES = ["cafe", "ZURICH", "postgres", "connection", "connection refused", '"connection refused"',
           "deploy*", "onnectio", "東京", "タワー", "f(x)", "NEAR", "-foo", "100%", "traceback",
           "invisibleinput", "zzzz", "a", "weather rainy", "port 5432"]
FILTERS = [Filters(), Filters(session_id="code"), Filters(role="user"), Filters(source="agent"),
           Filters(since=150, until=650), Filters(include_archived=True)]


@pytest.fixture
def stores(db: SessionDB, pg_db_url: str):
    """The corpus in a SQLite store, migrated into PostgreSQL; a message's
    uid names it on both sides (row ids are each store's own)."""
    db.create_session("trip", source="cli", title="Trip to Zürich")
    db.create_session("code", source="agent", title="Debugging")
    for sid, role, content, ts in ROWS:
        db.append_message(sid, {"role": role, "content": content, "timestamp": ts})
    pg = psycopg.connect(pg_db_url, autocommit=True)
    src = SqliteSide(str(db.path))
    try:
        transfer(src, PgSide(pg, pg_db_url))
    finally:
        src.close()
    yield db, pg
    pg.close()


def uids_sqlite(db: SessionDB, hits) -> list[str]:
    with db._read() as conn:
        return [uid_text(conn.execute("SELECT uid FROM messages WHERE id = ?", (h.message_id,))
                         .fetchone()[0]) for h in hits]  # (hex uids are stored as bytes: m010)


def uids_pg(pg, hits) -> list[str]:
    return [pg.execute("SELECT uid FROM messages WHERE id = %s", (h.message_id,)).fetchone()[0]
            for h in hits]


def sqlite_search(db: SessionDB, q: str, f: Filters, order: str):
    return db.search(q, session_id=f.session_id, role=f.role, source=f.source, since=f.since,
                     until=f.until, include_archived=f.include_archived, order=order)


@pytest.mark.parametrize("order", ["newest", "oldest", "rank"])
def test_same_hits_as_sqlite(stores, order):
    db, pg = stores
    for q in QUERIES:
        for f in FILTERS:
            want = uids_sqlite(db, sqlite_search(db, q, f, order))
            got_hits = pg_search.search(pg, q, filters=f, order=order)
            got = uids_pg(pg, got_hits)
            if order == "rank":  # ts_rank and bm25 differ; the window's members do not
                assert sorted(got) == sorted(want), (q, f)
            else:
                assert got == want, (q, f, order)
            assert all(h.snippet for h in got_hits), q


def test_hit_shape(stores):
    _, pg = stores
    hit = pg_search.search(pg, "refused", filters=Filters())[0]
    assert hit.via == "fts" and hit.score is not None and hit.score < 0
    assert "**refused**" in hit.snippet and hit.state == "active"
    assert pg_search.search(pg, "onnectio", filters=Filters())[0].via == "trigram"
    assert pg_search.search(pg, "a", filters=Filters())[0].via == "scan"
    tokyo = pg_search.search(pg, "タワー", filters=Filters())[0]
    assert tokyo.via == "trigram" and "**タワー**" in tokyo.snippet
    assert pg_search.search(pg, "cafe", filters=Filters())[0].session_title == "Trip to Zürich"


def test_paging_and_states(stores):
    _, pg = stores
    every = pg_search.search(pg, "connection", filters=Filters(), order="newest")
    pages = [h.message_id for o in range(len(every))
             for h in pg_search.search(pg, "connection", filters=Filters(), order="newest",
                                       limit=1, offset=o)]
    assert pages == [h.message_id for h in every]
    pg.execute("UPDATE messages SET state = 'archived' WHERE id = %s", (every[0].message_id,))
    assert every[0].message_id not in {h.message_id for h in pg_search.search(
        pg, "connection", filters=Filters())}
    archived = pg_search.search(pg, "connection", filters=Filters(include_archived=True))
    assert {h.state for h in archived} == {"active", "archived"}


def test_index_is_written_by_the_commit(stores):
    """Synchronous indexing: an edit is searchable the moment it commits."""
    _, pg = stores
    (mid,) = pg.execute("SELECT id FROM messages WHERE content LIKE 'connection pooling%'"
                        ).fetchone()
    pg.execute("UPDATE messages SET content = 'zebra crossing' WHERE id = %s", (mid,))
    assert [h.message_id for h in pg_search.search(pg, "zebra", filters=Filters())] == [mid]
    assert mid not in {h.message_id for h in pg_search.search(pg, "pooling", filters=Filters())}


def test_raw_syntax_errors_are_invalid_query(stores):
    _, pg = stores
    assert pg_search.search(pg, "refused & !pooling", filters=Filters(), raw=True)
    for bad in ("refused & (", "&&&", "a <-> "):
        with pytest.raises(InvalidQuery):
            pg_search.search(pg, bad, filters=Filters(), raw=True)
    with pytest.raises(InvalidQuery):
        pg_search.search(pg, "   ", filters=Filters())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40))
def test_hostile_text_never_errors(stores, text):
    _, pg = stores
    try:
        hits = pg_search.search(pg, text, filters=Filters())
    except InvalidQuery:
        return
    assert all(isinstance(h.message_id, int) for h in hits)


def test_json_blocks_indexed_like_sqlite(stores):
    _, pg = stores
    assert pg_search.search(pg, "traceback", filters=Filters())
    assert not pg_search.search(pg, "invisibleinput", filters=Filters())
    (text,) = pg.execute("SELECT hermes_search_text('user', 'json', %s)",
                         (json.dumps([{"type": "text", "text": "x"}, "junk", 3]),)).fetchone()
    assert text == "x"
    assert pg.execute("SELECT hermes_search_text('user', 'json', 'not json')").fetchone() == (None,)


def test_a_huge_word_vector_never_fails_the_insert(pg_db_url):
    """4-byte letters in hyphenated words: their lexemes would pass
    PostgreSQL's 1 MB tsvector limit and fail the INSERT; the words of the
    text's head are indexed instead, and the message is stored whole."""
    import random
    rng = random.Random(1)

    def ch() -> str:
        return chr(rng.randint(0x20000, 0x2A6DF))
    body = "needle " + " ".join(ch() + ch() + "-" + ch() + ch() for _ in range(40_000))
    with SessionDB.open(url=pg_db_url) as db:
        db.create_session("big", source="cli")
        mid = db.append_message("big", {"role": "user", "content": body})
        assert db.get_messages("big")[0]["content"] == body
        assert [h.message_id for h in db.search("needle")] == [mid]
