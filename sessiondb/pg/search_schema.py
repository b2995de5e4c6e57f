"""PostgreSQL search schema: the searchable text, a tsvector column, two GIN indexes.

Appended to the PostgreSQL migration list after the core tables. The
indexed text is the SQLite store's (sessiondb/index/search_index.py's
``text_expr``): a text message's content, or the ``text`` blocks and
``tool_result`` text of a JSON block list, capped at ``TOOL_TEXT_CAP``
characters for tool output and ``TEXT_CAP`` for anything else. It is
derived in SQL by IMMUTABLE functions, so every writer on every host keeps
the index exact without any application code.

Indexing is synchronous: a stored generated ``tsvector`` column with a GIN
index (words) and a GIN ``pg_trgm`` expression index (substrings, CJK),
written by the insert itself. docs/search.md says why (measured: an
after-commit queue costs a commit as much as the GIN entries do, and is
unsafe across hosts whose row ids commit out of order).
"""
from __future__ import annotations

from typing import Any

from ..index import TEXT_CAP, TOOL_TEXT_CAP

CONFIG = "hermes_search"
TEXT_FUNCTION = "hermes_search_text"
TSV_COLUMN = "search_tsv"
TSV_INDEX = "messages_search_tsv"
TRGM_INDEX = "messages_search_trgm"
INDEXES = (TSV_INDEX, TRGM_INDEX)

#: The searchable text of the messages row aliased ``row``.
def text_expr(row: str) -> str:
    return f"{TEXT_FUNCTION}({row}.role, {row}.content_kind, {row}.content)"


# JSON's escape of NUL (\u0000), which jsonb refuses: a block list holding it
# has each one turned into a space's escape first, so the message is
# searchable and NUL reads as a space, as on SQLite (search_index.text_expr).
# Backslash pairs are parked on chr(1) meanwhile (valid JSON text holds no
# raw control character), so an escaped backslash before "u0000" stays text.
_NUL_JSON = (r"replace(replace(replace(content, '\\', chr(1)), '\u0000', '\u0020'), chr(1),"
             r" '\\')")
_BLOCKS = f"""
CREATE OR REPLACE FUNCTION hermes_blocks_text(content text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $f$
DECLARE doc jsonb;
BEGIN
  -- content_kind 'json' rows are written by our codec, but a row written by
  -- another tool may hold anything: invalid JSON is simply not searchable.
  IF strpos(content, '\\u0000') > 0 THEN content := {_NUL_JSON}; END IF;
  BEGIN doc := content::jsonb; EXCEPTION WHEN others THEN RETURN NULL; END;
  IF jsonb_typeof(doc) <> 'array' THEN RETURN NULL; END IF;
  RETURN (SELECT string_agg(part, ' ' ORDER BY n) FROM (
    SELECT n, CASE b->>'type' WHEN 'text' THEN b->>'text'
      WHEN 'tool_result' THEN left(CASE jsonb_typeof(b->'content')
        WHEN 'string' THEN b->>'content'
        WHEN 'array' THEN (SELECT string_agg(r->>'text', ' ' ORDER BY k)
          FROM jsonb_array_elements(b->'content') WITH ORDINALITY AS x(r, k)
          WHERE jsonb_typeof(r) = 'object' AND r->>'type' = 'text') END, {TOOL_TEXT_CAP})
      END AS part
    FROM jsonb_array_elements(doc) WITH ORDINALITY AS e(b, n)
    WHERE jsonb_typeof(b) = 'object') AS t);
END $f$;
"""

# Text content holds NUL as the adapter's escape (U+E000 then '0', adapter.py),
# which is indexed as a space, as SQLite indexes NUL (before p015 it was
# indexed as is, which joined the words on either side into one).
_TEXT = f"""
CREATE OR REPLACE FUNCTION {TEXT_FUNCTION}(role text, kind text, content text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$
  SELECT left(CASE kind WHEN 'text' THEN replace(content, chr(57344) || '0', ' ')
              WHEN 'json' THEN hermes_blocks_text(content)
              END, CASE WHEN role = 'tool' THEN {TOOL_TEXT_CAP} ELSE {TEXT_CAP} END) $f$;
"""

# A prefix term: ':*' on the last lexeme of the phrase (an empty query
# stays empty). IMMUTABLE SQL, so with a known argument the planner folds it
# to a constant and estimates the match from the index's statistics.
_PREFIX = f"""
CREATE OR REPLACE FUNCTION hermes_prefix_tsquery(term text) RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$
  SELECT CASE WHEN numnode(phraseto_tsquery('{CONFIG}', term)) = 0
    THEN phraseto_tsquery('{CONFIG}', term)
    ELSE (phraseto_tsquery('{CONFIG}', term)::text || ':*')::tsquery END $f$;
"""

# The word vector of a text. PostgreSQL refuses a tsvector whose lexemes
# pass 1 MB (SQLSTATE 54000), which would fail the INSERT itself: 262,144
# characters of 4-byte letters in hyphenated words (each indexed whole and in
# parts) reach 2 MB. Lexemes hold at most about twice the text's bytes, so a
# text over TSV_MAX_BYTES has the words of its first TSV_SAFE_CHARS
# characters (at most 4 bytes each) indexed; any text of ASCII, or under
# 100,000 characters, is indexed whole up to TEXT_CAP. IMMUTABLE SQL: no
# exception block, so no subtransaction per insert.
TSV_MAX_BYTES = 400_000
TSV_SAFE_CHARS = TSV_MAX_BYTES // 4
_TSV = f"""
CREATE OR REPLACE FUNCTION hermes_search_tsv(body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $f$
  SELECT to_tsvector('{CONFIG}'::regconfig, CASE WHEN octet_length(body) <= {TSV_MAX_BYTES}
    THEN coalesce(body, '') ELSE left(body, {TSV_SAFE_CHARS}) END) $f$;
"""

# Words as SQLite's unicode61 tokenizer with remove_diacritics sees them:
# no stemming, no stop words (the 'simple' dictionary), accents folded.
_CONFIG = f"""
CREATE TEXT SEARCH CONFIGURATION {CONFIG} (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION {CONFIG}
  ALTER MAPPING FOR hword, hword_part, word, asciiword, asciihword, hword_asciipart
  WITH unaccent, simple;
"""


def p009_search_text(conn: Any) -> None:
    """The searchable text of a message (SQL functions) and the word configuration."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    conn.execute("CREATE EXTENSION IF NOT EXISTS unaccent")
    conn.execute(_BLOCKS)
    conn.execute(_TEXT)
    conn.execute(_CONFIG)
    conn.execute(_PREFIX)
    conn.execute(_TSV)


def index_ddl() -> dict[str, str]:
    """The CREATE INDEX statement of each search index, by name (p010's;
    a bulk load drops the indexes and builds them again with these)."""
    return {TSV_INDEX: f"CREATE INDEX IF NOT EXISTS {TSV_INDEX} ON messages USING gin"
                       f" ({TSV_COLUMN})",
            TRGM_INDEX: f"CREATE INDEX IF NOT EXISTS {TRGM_INDEX} ON messages USING gin"
                        f" ({text_expr('messages')} gin_trgm_ops)"}


def p010_search_index(conn: Any) -> None:
    """A generated tsvector column with its GIN index, and a trigram GIN index."""
    conn.execute(f"ALTER TABLE messages ADD COLUMN {TSV_COLUMN} tsvector GENERATED ALWAYS AS"
                 f" (hermes_search_tsv({text_expr('messages')})) STORED")
    for ddl in index_ddl().values():
        conn.execute(ddl)


#: ANALYZE's statistics target for the word vector (PostgreSQL's default is 100).
TSV_STATISTICS = 1000


def p012_search_statistics(conn: Any) -> None:
    """A finer word-frequency histogram for the planner.

    With the default target, ANALYZE keeps ~1,000 most common lexemes and
    guesses any other word at half the least common one's frequency: at
    1M messages a word in 94 rows was planned as 1,633, so a newest-first
    page walked the primary key backwards (240,000 rows for 20 hits, 480 ms)
    instead of reading the GIN index (7 ms). A target of 1000 keeps ~10,000
    lexemes and lowers that guess tenfold; ANALYZE samples 300,000 rows."""
    conn.execute(f"ALTER TABLE messages ALTER COLUMN {TSV_COLUMN}"
                 f" SET STATISTICS {TSV_STATISTICS}")
    conn.execute(f"ANALYZE messages ({TSV_COLUMN})")


def p015_nul_text(conn: Any) -> None:
    """NUL indexed as a space (the SQLite store's m014): the text functions
    take the rule, and the rows holding a NUL (its escape in text content,
    JSON's in a block list) are rewritten in place, which recomputes their
    word vector and trigram index entries in this transaction. No other
    row's text changes, so no other index entry does."""
    conn.execute(_BLOCKS)
    conn.execute(_TEXT)
    conn.execute("UPDATE messages SET content = content WHERE (content_kind = 'text'"
                 " AND strpos(content, chr(57344) || '0') > 0) OR (content_kind = 'json'"
                 " AND strpos(content, '\\u0000') > 0)")


SEARCH_MIGRATIONS = (p009_search_text, p010_search_index)
