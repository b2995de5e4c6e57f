"""Every transaction statement of the store package is issued by the core.

A second place that starts a transaction (BEGIN, a savepoint, COMMIT or
ROLLBACK written out) would bypass the containment guard's checks, the lock
and the indexer's wake-up. Trigger bodies (CREATE TRIGGER ... BEGIN ... END)
are SQL text, not transaction statements, and do not match.
"""
from __future__ import annotations

import re
from pathlib import Path

import sessiondb

PACKAGE = Path(sessiondb.__file__).resolve().parent
STATEMENT = re.compile(r"""execute\(\s*f?["']\s*(BEGIN|SAVEPOINT|RELEASE|COMMIT|ROLLBACK|END)\b""",
                       re.IGNORECASE)
GONE = ("index_guarded", "write_fail_open", "index_safe_write", "_index_covered",
        "guarded_write")


def test_no_transaction_statement_outside_the_core():
    # Each backend has one core: sessiondb/engine/core.py (SQLite), sessiondb/pg/core.py.
    found = [f"{path.name}:{n}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "core.py"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if STATEMENT.search(line)]
    assert found == []


def test_the_core_is_where_they_are():
    text = (PACKAGE / "engine" / "core.py").read_text()
    assert {m.group(1).upper() for m in STATEMENT.finditer(text)} >= {
        "BEGIN", "SAVEPOINT", "RELEASE", "COMMIT", "ROLLBACK"}


def test_the_old_write_wrappers_are_gone():
    text = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    assert [name for name in GONE if name in text] == []
