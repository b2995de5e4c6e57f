"""A NUL character in a message on PostgreSQL: the words after it are found
(word and substring plans), as on SQLite, and the message round-trips; p015
makes the rows a database indexed before it searchable."""
from __future__ import annotations

import psycopg

from sessiondb import SessionDB
from sessiondb.pg import search_schema
from tests.sessiondb.search.test_search_nul import AFTER_NUL, NUL_MESSAGES, PLAIN, SUBSTRINGS

EXPECTED = {**{q: [i] for q, i in {**AFTER_NUL, **SUBSTRINGS}.items()}, "u0000": [5]}


def fill(url: str) -> None:
    with SessionDB.open(url=url) as db:
        db.create_session("s", source="test", title="t")
        db.append_messages("s", [dict(m) for m in NUL_MESSAGES + PLAIN])


def found(url: str) -> dict[str, list[int]]:
    with SessionDB.open(url=url) as db:
        ids = [m["_db_persisted"].id for m in db.get_messages("s")]
        return {q: sorted(ids.index(h.message_id) for h in db.search(q)) for q in EXPECTED}


def test_words_after_a_nul_are_found_and_the_message_round_trips(pg_db_url: str) -> None:
    fill(pg_db_url)
    assert found(pg_db_url) == EXPECTED
    with SessionDB.open(url=pg_db_url) as db:
        stored = [m["content"] for m in db.get_messages("s")][:len(NUL_MESSAGES)]
    assert stored == [m["content"] for m in NUL_MESSAGES]
    with psycopg.connect(pg_db_url) as conn:  # words, not only substrings of a joined word
        words = {w for (w,) in conn.execute(
            f"SELECT word FROM ts_stat('SELECT {search_schema.TSV_COLUMN} FROM messages')")}
    assert set(AFTER_NUL) <= words


def as_p014(url: str) -> None:
    """The text functions as p009 made them, the rows' vectors and trigram
    entries computed by them, and no p015 in the ledger."""
    blocks = "\n".join(line for line in search_schema._BLOCKS.splitlines()
                       if "strpos(content" not in line)
    text = search_schema._TEXT.replace("replace(content, chr(57344) || '0', ' ')", "content")
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute(blocks)
        conn.execute(text)
        conn.execute("UPDATE messages SET content = content")
        conn.execute("DELETE FROM migrations WHERE name = 'p015_nul_text'")


def test_p015_makes_rows_indexed_before_it_searchable(pg_db_url: str) -> None:
    fill(pg_db_url)
    as_p014(pg_db_url)
    with psycopg.connect(pg_db_url) as conn:  # the block lists with a NUL were unsearchable
        (unindexed,) = conn.execute("SELECT count(*) FROM messages WHERE"
                                    f" {search_schema.text_expr('messages')} IS NULL").fetchone()
    assert unindexed == 2
    assert found(pg_db_url) == EXPECTED  # opening applied p015
    with psycopg.connect(pg_db_url) as conn:
        assert conn.execute("SELECT 1 FROM migrations WHERE name = 'p015_nul_text'").fetchone()
        (bad,) = conn.execute(f"SELECT count(*) FROM messages WHERE {search_schema.TSV_COLUMN}"
                              " IS DISTINCT FROM hermes_search_tsv("
                              f"{search_schema.text_expr('messages')})").fetchone()
    assert bad == 0
