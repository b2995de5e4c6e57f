"""Inspect's check of each FTS5 table: exhaustive on a small file, sampled on a big one.

FTS5's ``integrity-check`` reads every segment of the index and, for an
external-content table, tokenizes the whole content again: on our stores
the trigram index alone costs about as much as ``PRAGMA quick_check`` of
the whole file, which inspect runs anyway (and which already walks every
b-tree page of the index's shadow tables). So a file up to
``FULL_CHECK_BYTES`` (doctor's threshold for its exhaustive default) gets
the integrity-check and a MATCH probe, as before; a bigger one gets
``SAMPLE_PROBES`` MATCH probes of rows spread over the rowid range: each
sampled row's word must find that row. The result says which it was
(``method``). The exhaustive check of a home's store is `doctor --full`.

Rows the index is not meant to hold yet are never probed: our store
indexes after the commit (sessiondb/index/search_index.py), so rows above its
watermark and rows in its change log are left out of the sample.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

import apsw

from ..schema import READ_ERRORS, quote

FULL_CHECK_BYTES = 128 << 20
SAMPLE_PROBES = 16
# A whitespace-separated ASCII word: every tokenizer we meet (unicode61, porter,
# trigram, ascii) finds it in the text as one token (or, trigram, its substrings).
_WORD = re.compile(r"(?<!\S)[A-Za-z0-9]{3,40}(?!\S)")
_FIRST_WORD = re.compile(r"[^\W_]{3,}")


@dataclass
class FtsHealth:
    """One fts5 table: its integrity-check (or, ``method`` "sampled", the
    sampled probes standing in for it) and a MATCH probe."""

    name: str
    integrity_ok: bool
    probe_ok: bool
    error: str | None = None
    method: str = "integrity-check"  # or "sampled"
    probes: int = 1


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _probe_token(conn: apsw.Connection, name: str) -> tuple[int, str] | None:
    for row in conn.execute(f"SELECT rowid, * FROM {quote(name)} LIMIT 50"):
        for value in row[1:]:
            if isinstance(value, str):
                m = _FIRST_WORD.search(value)
                if m:
                    return row[0], m.group(0)
    return None


def match_needle(conn: apsw.Connection, name: str, word: str) -> str:
    """The MATCH expression for ``word``: a phrase, or, for an index that
    keeps no positions (our trigram index since m009: ``detail=none``, which
    refuses phrases), the AND of its trigrams, which every row holding the
    word matches too."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    sql = " ".join(str(row[0] if row else "").lower().split())
    if "detail=none" not in sql and "detail=column" not in sql:
        return '"' + word.replace('"', '""') + '"'
    return " AND ".join('"' + word[i:i + 3].replace('"', '""') + '"'
                        for i in range(max(len(word) - 2, 1)))


def fts_health(conn: apsw.Connection, name: str) -> FtsHealth:
    """integrity-check, then a MATCH for a word of an indexed row must find it."""
    q = quote(name)
    try:
        conn.execute(f"INSERT INTO {q}({q}) VALUES('integrity-check')")
    except READ_ERRORS as e:
        return FtsHealth(name, False, False, _err(e))
    return match_probe(conn, name)


def match_probe(conn: apsw.Connection, name: str) -> FtsHealth:
    """A word of an indexed row must find that row (integrity taken as ok:
    the caller has checked it, or ``PRAGMA integrity_check`` did). The
    MATCH is asked for that rowid only: a common word's hits are most of
    the table (a set of them held ~80 MB at 1M messages in verify)."""
    q = quote(name)
    try:
        probe = _probe_token(conn, name)
        if probe is None:
            conn.execute(f"SELECT rowid FROM {q} WHERE {q} MATCH ? LIMIT 1",
                         (match_needle(conn, name, "probe"),))
            return FtsHealth(name, True, True)
        rowid, word = probe
        ok = conn.execute(f"SELECT 1 FROM {q} WHERE {q} MATCH ? AND rowid = ?",
                          (match_needle(conn, name, word), rowid)).fetchone() is not None
        return FtsHealth(name, True, ok, None if ok else "MATCH probe missed an indexed row")
    except READ_ERRORS as e:
        return FtsHealth(name, True, False, _err(e))


def _not_indexed_yet(conn: apsw.Connection) -> tuple[int | None, set[int]]:
    """Our store's watermark and change-log ids (None, empty for other files)."""
    try:
        row = conn.execute("SELECT CAST(value AS INTEGER) FROM state_meta"
                           " WHERE key = 'fts_watermark'").fetchone()
    except READ_ERRORS:
        return None, set()
    if row is None:
        return None, set()
    try:
        changed = {r[0] for r in conn.execute("SELECT message_id FROM search_changes")}
    except READ_ERRORS:
        changed = set()
    return row[0], changed


def _bounds(conn: apsw.Connection, q: str, top: int | None) -> tuple[int, int] | None:
    lo = conn.execute(f"SELECT rowid FROM {q} ORDER BY rowid LIMIT 1").fetchone()
    hi = conn.execute(f"SELECT rowid FROM {q} ORDER BY rowid DESC LIMIT 1").fetchone()
    if lo is None or hi is None:
        return None
    high = hi[0] if top is None else min(hi[0], top)
    return (lo[0], high) if lo[0] <= high else None


def _sample_row(conn: apsw.Connection, q: str, at: int, top: int,
                skip: set[int]) -> tuple[int, str] | None:
    """The first row at or after ``at`` (up to ``top``) with a probe word."""
    for row in conn.execute(f"SELECT rowid, * FROM {q} WHERE rowid >= ? AND rowid <= ?"
                            " ORDER BY rowid LIMIT 8", (at, top)):
        if row[0] in skip:
            continue
        for value in row[1:]:
            m = _WORD.search(value) if isinstance(value, str) else None
            if m:
                return row[0], m.group(0)
    return None


def sampled_health(conn: apsw.Connection, name: str, *, probes: int = SAMPLE_PROBES,
                   rng: random.Random | None = None) -> FtsHealth:
    """MATCH probes of rows spread over the indexed rowid range (bounded: a
    few seeks each); every sampled row must be found by its own word."""
    q, rng = quote(name), rng or random.Random()
    done = 0
    try:
        top, skip = _not_indexed_yet(conn)
        bounds = _bounds(conn, q, top)
        lo, hi = bounds if bounds is not None else (0, 0)
        for _ in range(probes if bounds is not None else 0):
            found = _sample_row(conn, q, rng.randint(lo, hi), hi, skip)
            if found is None:
                continue
            rowid, word = found
            done += 1
            if conn.execute(f"SELECT 1 FROM {q} WHERE {q} MATCH ? AND rowid = ?",
                            (match_needle(conn, name, word), rowid)).fetchone() is None:
                return FtsHealth(name, False, False, f"MATCH probe missed indexed row {rowid}",
                                 "sampled", done)
        if not done:  # nothing to probe (empty): the index must still answer a query
            conn.execute(f"SELECT rowid FROM {q} WHERE {q} MATCH ? LIMIT 1",
                         (match_needle(conn, name, "probe"),))
    except READ_ERRORS as e:
        return FtsHealth(name, False, False, _err(e), "sampled", done)
    return FtsHealth(name, True, True, None, "sampled", done)


def check_fts(conn: apsw.Connection, name: str, *, full: bool) -> FtsHealth:
    """The exhaustive check (``full``) or the sampled one."""
    return fts_health(conn, name) if full else sampled_health(conn, name)
