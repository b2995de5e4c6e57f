"""Index-only damage, made while the store is closed, never reaches the
operator as a damaged store: the first `sessions search` after opening
answers (from the fallback scan when it must), exits 0, and the step it
names for the damage works on that damage.

Before: a read snapshot whose FTS5 read failed ended by COMMIT, which
reported FTS5's kept error again as "database disk image is malformed";
the search exited 1 with "hermes will not write to it" and sent the
operator to recover the whole store.
"""
from __future__ import annotations

import json
import random
import shlex
import shutil
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from tests.helpers.stores import fill_home

TRIALS = 100
INDEX_TABLES = ("messages_fts_data", "messages_fts_idx", "messages_fts_docsize",
                "messages_terms_data", "messages_terms_idx")
QUERIES = ("alpha", "charlie delta", '"echo foxtrot"', "gol*", "n12", "zz", "hello")


def _pages(db: Path, table: str) -> tuple[list[int], int]:
    conn = apsw.Connection(str(db))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        pages = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (table,))]
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    return pages, size


def damage_index(db: Path, rng: random.Random, table: str | None = None) -> str:
    """Random bytes over a random share of one index table's pages."""
    table = table or rng.choice(INDEX_TABLES)
    pages, size = _pages(db, table)
    with open(db, "r+b") as f:
        for page in rng.sample(pages, max(1, int(len(pages) * rng.uniform(0.2, 1.0)))):
            f.seek((page - 1) * size)
            f.write(rng.randbytes(size))
    return table


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("tmpl") / "home"
    fill_home(home, n=1500)
    return home


def _search(home: Path, query: str) -> tuple[int, str, dict | None]:
    res = CliRunner().invoke(cli, ["--home", str(home), "sessions", "search", query, "--json"])
    doc = json.loads(res.stdout) if res.exit_code == 0 else None
    return res.exit_code, res.output, doc


def test_index_damage_never_fails_a_search(template: Path, tmp_path: Path) -> None:
    failures = []
    for trial in range(TRIALS):
        rng = random.Random(trial)
        home = tmp_path / f"t{trial}"
        shutil.copytree(template, home)
        table = damage_index(home / "state.db", rng)
        if rng.random() < 0.6:  # a write first, as an agent's next turn would
            with SessionDB.open(home) as db:
                db.append_messages("shared", [{"role": "user", "content": "hello again"}])
        query = rng.choice(QUERIES)
        code, out, doc = _search(home, query)
        if code != 0 or "will not write" in out or "recover" in out or doc is None:
            failures.append((trial, table, query, code, out[-300:]))
        shutil.rmtree(home)
    assert not failures, failures


def test_the_step_named_for_index_damage_mends_it(template: Path, tmp_path: Path) -> None:
    """The note names a command (with --home) that works on damaged pages,
    after which search is back on the index."""
    home = tmp_path / "home"
    shutil.copytree(template, home)
    damage_index(home / "state.db", random.Random(5), "messages_fts_data")
    res = CliRunner().invoke(cli, ["--home", str(home), "sessions", "search", "alpha"])
    assert res.exit_code == 0, res.output
    note = next(line for line in res.output.splitlines() if line.startswith("note:"))
    step = note.split("Run: ", 1)[1]
    assert step == shlex.join(["hermes", "--home", str(home), "sessions", "repair"])
    fixed = CliRunner().invoke(cli, shlex.split(step)[1:])
    assert fixed.exit_code == 0, fixed.output
    code, out, doc = _search(home, "alpha")
    assert code == 0 and doc is not None and not doc["index_stale"], out
    assert {h["via"] for h in doc["hits"]} == {"fts"}, doc["hits"][:3]
