"""The MATCH probe verify runs on a recovered store holds one row, never the hits.

`hstate_recovery.inspection.inspect_fts.match_probe` checks that a word of an indexed row
finds that row. The word is whatever the first rows hold, so on real
stores it is a common one: at 1,000,000 messages (bench/scale.py) its
hits were ~900,000 rows, and collecting them in a set took verify's peak
RSS from 64 MB to 141 MB (that one call: +93 MB, 8 s). Here a table of
300,000 rows that all hold the probe word is probed in a fresh process;
its peak RSS may not grow by more than a few MB (the code that collected
the hits in a set grew by 17.7 MB here).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

ROOT = Path(__file__).resolve().parents[3]
ROWS = 300_000
# The child's own peak (VmHWM): ru_maxrss would start at pytest's peak, which
# Linux carries across the exec of a forked child.
PROBE = r"""
import json, sys
import apsw
from hstate_recovery.inspection.inspect_fts import match_probe
def peak_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
conn = apsw.Connection(sys.argv[1], flags=apsw.SQLITE_OPEN_READONLY)
conn.execute("SELECT count(*) FROM t").fetchall()  # schema and the first pages read
before = peak_kb()
r = match_probe(conn, sys.argv[2])
after = peak_kb()
print(json.dumps({"ok": r.integrity_ok and r.probe_ok, "error": r.error,
                  "grew_kb": after - before}))
"""


@pytest.fixture(scope="module")
def common_word_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tables in the shapes of our two indexes (words; trigrams without
    positions), every row holding the word 'journal'."""
    path = tmp_path_factory.mktemp("fts") / "common.db"
    conn = apsw.Connection(str(path))
    with conn:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(text)")
        conn.execute("CREATE VIRTUAL TABLE g USING fts5(text, tokenize='trigram', detail=none)")
        for table in ("t", "g"):
            conn.execute(f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                         f"WHERE i < {ROWS}) INSERT INTO {table}(rowid, text) "
                         "SELECT i, 'journal entry ' || i FROM n")
    conn.close()
    return path


@pytest.mark.parametrize("table", ["t", "g"])
def test_match_probe_does_not_hold_the_hits(common_word_store: Path, table: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, str(common_word_store), table],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ok"], out
    # one row asked for: FTS5's doclist pages and a cursor, not 300,000 rowids
    assert out["grew_kb"] < 6 * 1024, out


def test_match_probe_still_misses_a_row_the_index_lost(tmp_path: Path) -> None:
    """The probe's row is asked for by rowid: an index that no longer lists
    that row for its word fails the probe (a contentless table's rows stay
    readable while its index entries go)."""
    from hstate_recovery.inspection.inspect_fts import match_probe
    path = tmp_path / "lost.db"
    conn = apsw.Connection(str(path))
    with conn:
        conn.execute("CREATE VIRTUAL TABLE c USING fts5(text, content='src', content_rowid='id')")
        conn.execute("CREATE TABLE src(id INTEGER PRIMARY KEY, text TEXT)")
        conn.execute("INSERT INTO src VALUES (1, 'journal one'), (2, 'journal two')")
        conn.execute("INSERT INTO c(rowid, text) VALUES (2, 'journal two')")  # row 1 never indexed
    assert match_probe(conn, "c").probe_ok is False
    with conn:
        conn.execute("INSERT INTO c(rowid, text) VALUES (1, 'journal one')")
    assert match_probe(conn, "c").probe_ok is True
    conn.close()
