"""`recover --inspect-only` on files other programs wrote: what each is, and
a verdict whose next command applies to it (never reindex, never "restore
from a backup" while pages can still be carved)."""
from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from hstate_recovery.inspection.examine import inspect
from tests.helpers import foreign_dbs as f
from tests.helpers.damage import bundle_hashes, pages_of, write_at

PS = 1024
BUILD = {
    "hermes-agent": lambda p: f.build_hermes_agent(p, sessions=6, messages=20, page_size=PS),
    "llm": lambda p: f.build_llm(p, conversations=6, page_size=PS),
    "openai-agents": lambda p: f.build_openai_agents(p, sessions=4, page_size=PS),
    "langgraph": lambda p: f.build_langgraph(p, threads=4, page_size=PS),
}
LABELS = {"hermes-agent": "Hermes Agent state.db, schema v31",
          "llm": "llm logs.db (threads/turns)", "openai-agents": "OpenAI Agents SDK SQLiteSession",
          "langgraph": "LangGraph SqliteSaver"}


@pytest.mark.parametrize("kind", sorted(BUILD))
def test_healthy_foreign_file_is_healthy_and_named(tmp_path: Path, kind: str) -> None:
    truth = BUILD[kind](tmp_path / "state.db")
    before = bundle_hashes(truth.path)
    r = inspect(truth.path)
    assert bundle_hashes(truth.path) == before
    assert (r.verdict, r.next_command) == ("healthy", None)
    assert r.identification["kind"] == kind and r.identification["label"] == LABELS[kind]
    assert r.migrations == {}  # our ledger means nothing here


@pytest.mark.parametrize("kind", ["hermes-agent", "llm"])
def test_foreign_search_index_damage_is_recovered_never_reindexed(tmp_path: Path,
                                                                  kind: str) -> None:
    truth = BUILD[kind](tmp_path / "state.db")
    for vt in truth.virtual:
        for p in pages_of(truth.path, vt + "_data"):
            write_at(truth.path, (p - 1) * PS, b"\xde\xad\xbe\xef" * (PS // 4))
    r = inspect(truth.path)
    assert r.verdict == "fts_only"
    assert "recover --source" in r.next_command and "reindex" not in r.next_command


@pytest.mark.parametrize("kind", sorted(BUILD))
def test_page_one_zeroed_is_structural_with_a_recover_to_run(tmp_path: Path, kind: str) -> None:
    truth = BUILD[kind](tmp_path / "state.db")
    write_at(truth.path, 0, bytes(PS))
    r = inspect(truth.path)
    assert r.verdict == "structural"
    assert "recover --source" in r.next_command and "--template" not in r.next_command
    assert r.identification["kind"] == kind and r.identification["guessed"]


def test_unknown_format_with_page_one_zeroed_asks_for_a_template(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA page_size={PS}; CREATE TABLE notes (id INTEGER PRIMARY KEY, "
                 "title TEXT NOT NULL, body TEXT, stars INTEGER)")
    with conn:
        for i in range(400):
            conn.execute("INSERT INTO notes(title, body, stars) VALUES (?, ?, ?)",
                         (f"note {i}", "x" * 80, i % 5))
    conn.close()
    write_at(path, 0, bytes(PS))
    r = inspect(path)
    assert r.verdict == "structural"
    assert r.next_command.endswith("--template TEMPLATE")
    assert "--template" in r.explanation


def test_cli_names_the_file_and_recovers_it_with_a_template(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from hstate_cli.main import cli

    src = tmp_path / "src" / "state.db"
    src.parent.mkdir()
    BUILD["hermes-agent"](src)
    template = tmp_path / "template.db"
    BUILD["hermes-agent"](template)
    run = CliRunner().invoke
    r = run(cli, ["sessions", "recover", "--source", str(src), "--inspect-only"])
    assert r.exit_code == 0 and "file: Hermes Agent state.db, schema v31" in r.output
    write_at(src, 0, bytes(PS))
    before = bundle_hashes(src)
    r = run(cli, ["sessions", "recover", "--source", str(src), "--output",
                  str(tmp_path / "new.db"), "--template", str(template), "--allow-partial"])
    assert r.exit_code in (0, 3), r.output
    assert "schema from: template" in r.output and bundle_hashes(src) == before
