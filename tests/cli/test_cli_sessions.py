"""`hermes sessions list/show/rename/delete/stats` and the grouped help."""
from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_cli.params import parse_when
from sessiondb import SessionDB


def run(*args: str, **kw):
    return CliRunner().invoke(cli, list(args), **kw)


@pytest.fixture
def three(hermes_home):
    """Sessions started 10 days ago, 2 hours ago and now (through the store's clock)."""
    now = time.time()
    for sid, age, source in (("old", 10 * 86400, "agent"), ("recent", 7200, "cli"),
                             ("new", 0, "agent")):
        with SessionDB.open(clock=lambda age=age: now - age) as db:
            db.create_session(sid, source=source, title=f"title {sid}")
            db.append_message(sid, {"role": "user", "content": f"hello from {sid}"})
    return hermes_home


def ids(res) -> list[str]:
    return [s["id"] for s in json.loads(res.stdout)["sessions"]]


def test_list_filters_by_since_source_and_limit(three):
    assert ids(run("sessions", "list", "--json")) == ["new", "recent", "old"]
    assert ids(run("sessions", "list", "--since", "1d", "--json")) == ["new", "recent"]
    assert ids(run("sessions", "list", "--since", "1d", "--source", "agent", "--json")) == ["new"]
    assert ids(run("sessions", "list", "--limit", "1", "--json")) == ["new"]
    day = time.strftime("%Y-%m-%d", time.localtime(time.time() - 3 * 86400))
    assert ids(run("sessions", "list", "--since", day, "--json")) == ["new", "recent"]
    doc = json.loads(run("sessions", "list", "--json").stdout)
    assert doc["count"] == 3
    assert set(doc["sessions"][0]) >= {"id", "source", "title", "started_at", "message_count"}


def test_list_bad_since_is_a_usage_error(three):
    res = run("sessions", "list", "--since", "yesterdayish")
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines()[-1] == (
        "Error: Invalid value for '--since': 'yesterdayish' is not a date: use 2026-01-31, "
        "2026-01-31T14:00 or an age such as 7d")


def test_parse_when_forms():
    assert parse_when("7d", now=1_000_000.0) == 1_000_000.0 - 7 * 86400
    assert parse_when("30m", now=1000.0) == 1000.0 - 1800
    assert parse_when("2026-01-31T14:00+00:00") == 1769868000.0
    with pytest.raises(ValueError):
        parse_when("7 days")


def test_show_json_has_rows_aligned_with_messages(hermes_home):
    with SessionDB.open() as db:
        db.create_session("s", source="t")
        db.append_messages("s", [{"role": "user", "content": f"m{i}"} for i in range(3)])
        with db.atomic() as conn:
            conn.execute("UPDATE messages SET state = 'archived' WHERE position = 1")
    live = json.loads(run("sessions", "show", "s", "--json").stdout)
    assert [m["content"] for m in live["messages"]] == ["m1", "m2"]
    every = json.loads(run("sessions", "show", "s", "--archived", "--json").stdout)
    assert [m["content"] for m in every["messages"]] == ["m0", "m1", "m2"]
    assert [r["state"] for r in every["rows"]] == ["archived", "active", "active"]
    assert set(every["rows"][0]) == {"id", "uid", "position", "timestamp", "state", "kind",
                                     "compaction_id"}
    human = run("sessions", "show", "s", "--archived").stdout
    assert "user (archived)" in human and "m2" in human


def test_rename_sets_the_title_and_refuses_blank(three):
    res = run("sessions", "rename", "old", "Owls and herons", "--json")
    assert res.exit_code == 0
    assert json.loads(res.stdout) == {"id": "old", "title": "Owls and herons"}
    with SessionDB.open() as db:
        assert db.get_session("old").title == "Owls and herons"
    blank = run("sessions", "rename", "old", "   ")
    assert blank.exit_code == 2
    assert blank.stderr.strip().splitlines()[-1] == \
        "Error: Invalid value for TITLE: the title must not be empty"
    missing = run("sessions", "rename", "nope", "x")
    assert (missing.exit_code, missing.stderr) == (1, "Error: no session 'nope'\n")


def test_delete_asks_and_declining_keeps_everything(three):
    res = run("sessions", "delete", "old", input="n\n")
    assert res.exit_code == 1
    assert "Delete session old (title old, 1 message)? [y/N]" in res.stderr
    assert res.stderr.strip().splitlines()[-1] == "Error: not confirmed; nothing was deleted"
    no_input = run("sessions", "delete", "old", input="")
    assert no_input.exit_code == 1
    with SessionDB.open() as db:
        assert db.get_session("old").message_count == 1
        assert len(db.get_messages("old")) == 1


def test_delete_confirmed_or_with_yes(three):
    res = run("sessions", "delete", "old", input="y\n")
    assert res.exit_code == 0
    assert res.stdout == "Deleted session old and its 1 message.\n"
    res = run("sessions", "delete", "recent", "--yes", "--json")
    assert res.exit_code == 0
    assert res.stderr == ""  # no prompt at all
    assert json.loads(res.stdout) == {"deleted": "recent", "messages": 1}
    assert ids(run("sessions", "list", "--json")) == ["new"]
    gone = run("sessions", "delete", "recent", "--yes")
    assert (gone.exit_code, gone.stderr) == (1, "Error: no session 'recent'\n")


def test_stats_json_keys_and_values(three):
    res = run("sessions", "stats", "--json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert set(doc) == {"path", "sessions", "messages", "messages_by_state", "files", "pages",
                        "fts", "usage"}
    assert (doc["sessions"], doc["messages"]) == (3, 3)
    assert doc["messages_by_state"] == {"active": 3, "archived": 0, "rewound": 0}
    assert doc["files"]["db"] > 0 and set(doc["files"]) == {"db", "wal", "shm"}
    assert doc["pages"]["page_size"] * doc["pages"]["page_count"] <= doc["files"]["db"] + \
        (doc["files"]["wal"] or 0)
    assert set(doc["fts"]) == {"tables", "bytes", "method"}
    # every store has the word index (messages_fts) and its term table (m015).
    assert {"messages_fts_data", "messages_terms_data"} <= set(doc["fts"]["tables"])


def test_stats_measures_both_search_indexes(three):
    """fts.bytes covers every page of the word index and the term table (and
    of nothing else), as SQLite's own dbstat counts them."""
    doc = json.loads(run("sessions", "stats", "--json").stdout)["fts"]
    with SessionDB.open() as db, db._read() as conn:
        by_family = {}
        for prefix in ("messages_fts", "messages_terms"):
            (size,) = conn.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE aggregate = 1 AND name IN"
                " (SELECT name FROM sqlite_master WHERE type IN ('table', 'index')"
                "  AND (name LIKE ? || '%' OR tbl_name LIKE ? || '%'))",
                (prefix, prefix)).fetchone()
            by_family[prefix] = size
    assert doc["method"] == "dbstat"
    assert by_family["messages_terms"] > 0 and by_family["messages_fts"] > 0
    assert doc["bytes"] == by_family["messages_fts"] + by_family["messages_terms"]
    assert all(t.startswith(("messages_fts", "messages_terms")) for t in doc["tables"])


def test_stats_measures_an_fts_index_with_dbstat(three):
    before = json.loads(run("sessions", "stats", "--json").stdout)["fts"]
    with SessionDB.open() as db, db.atomic() as conn:
        # Any messages_fts* table counts as the search index; a probe of our own
        # keeps this test independent of the real index's schema.
        conn.execute("CREATE VIRTUAL TABLE messages_fts_probe USING fts5(content)")
        conn.execute("INSERT INTO messages_fts_probe(content)"
                     " SELECT group_concat(content, ' ') FROM messages")
    doc = json.loads(run("sessions", "stats", "--json").stdout)
    assert doc["fts"]["method"] == "dbstat"
    assert "messages_fts_probe_data" in doc["fts"]["tables"]
    # Five shadow tables (_data, _idx, _content, _docsize, _config), a page each at least.
    assert doc["fts"]["bytes"] - (before["bytes"] or 0) >= 5 * doc["pages"]["page_size"]
    assert "(dbstat)" in run("sessions", "stats").stdout


def test_help_groups_commands_under_headings():
    top = run("--help").stdout
    assert "Sessions:\n  sessions" in top and "Recovery:\n  doctor" in top
    sub = run("sessions", "--help").stdout
    for heading, names in (("Read:", ("list", "show", "stats")), ("Move:", ("export", "import")),
                           ("Change:", ("rename", "delete"))):
        block = sub.split(heading, 1)[1].split("\n\n", 1)[0]
        for name in names:
            assert f"\n  {name} " in block, (heading, name)


def test_docs_cover_every_command_and_json_key(three, tmp_path):
    from pathlib import Path

    from tests.cli.test_cli_basics import _commands
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    for path, _cmd in _commands(cli):
        assert " ".join(path) in docs, path
    out = tmp_path / "e.jsonl"
    summary = json.loads(run("sessions", "export", "--all", "-o", str(out), "--json").stdout)
    imported = json.loads(run("sessions", "import", str(out), "--json").stdout)
    stats = json.loads(run("sessions", "stats", "--json").stdout)
    for key in [*summary, *imported, *stats, *stats["files"], *stats["pages"], *stats["fts"]]:
        assert f'"{key}"' in docs or f"`{key}`" in docs, key
