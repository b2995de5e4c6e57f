"""`hermes sessions search` and `hermes sessions reindex` through the real CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from sessiondb.index.search_index import mark_stale


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def filled(hermes_home):
    with SessionDB.open() as db:
        db.create_session("s1", source="agent", title="Ops")
        db.create_session("s2", source="cli", title="Chat")
        db.append_messages("s1", [{"role": "user", "content": "the deploy failed with timeout"},
                                  {"role": "assistant", "content": "retry the deploy"}])
        db.append_message("s2", {"role": "user", "content": "deploy notes"})
    return hermes_home


def test_search_table_and_json(filled):
    res = run("sessions", "search", "deploy")
    assert res.exit_code == 0, res.output
    assert "deploy" in res.output and "s1" in res.output and "s2" in res.output
    assert "**" not in res.output  # no markdown markers on a pipe
    doc = json.loads(run("sessions", "search", "deploy", "--session", "s1", "--role", "user",
                         "--json").output)
    assert doc["index_stale"] is False
    assert [(h["session_id"], h["role"], h["via"]) for h in doc["hits"]] == [("s1", "user", "fts")]
    assert doc["hits"][0]["session_title"] == "Ops"
    doc = json.loads(run("sessions", "search", "deploy", "--limit", "1", "--json").output)
    assert len(doc["hits"]) == 1


def test_search_without_matches(filled):
    res = run("sessions", "search", "nothinglikethis")
    assert (res.exit_code, res.output) == (0, "no matches\n")


def test_search_bad_query_is_usage_error(filled):
    res = run("sessions", "search", '""')
    assert res.exit_code == 2
    assert "the query has no words to search for" in res.output
    res = run("sessions", "search", "deploy", "--limit", "0")
    assert res.exit_code == 2


def test_search_special_characters_do_not_crash(filled):
    for query in ["(", "NEAR(", "a:b", '"unbalanced', "-", "*"]:
        res = run("sessions", "search", query, "--json")
        assert res.exit_code == 0, (query, res.output)
        assert json.loads(res.output)["hits"] == [] or query in ("-",)


def test_reindex_json_and_text(filled):
    doc = json.loads(run("sessions", "reindex", "--json").stdout)  # stderr: a warning
    assert doc["messages"] == 3 and doc["was_stale"] is False
    res = run("sessions", "reindex")
    assert res.exit_code == 0
    assert res.output.startswith("search index rebuilt: 3 messages in ")
    doc = json.loads(run("sessions", "search", "timeout", "--json").output)
    assert len(doc["hits"]) == 1


def test_search_reports_fallback_when_stale(filled, hermes_home):
    """Another process holds the store, so opening does not rebuild the index."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from sessiondb import SessionDB; "
         "db = SessionDB.open(); print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with SessionDB.open() as db:
            with db.atomic() as conn:
                mark_stale(conn, "test", None)
        res = run("sessions", "search", "deploy")
        assert res.exit_code == 0
        # repair (pinned to the home), which also mends damaged index pages
        assert f"Run: hermes --home {hermes_home} sessions repair" in res.stderr
        doc = json.loads(run("sessions", "search", "deploy", "--json").stdout)
        assert doc["index_stale"] is True and {h["via"] for h in doc["hits"]} == {"fallback"}
        res = run("sessions", "reindex")
        assert res.exit_code == 1
        assert res.output.startswith(f"Error: processes {holder.pid} have ")
    finally:
        holder.communicate("", timeout=60)
    assert run("sessions", "reindex").exit_code == 0
    doc = json.loads(run("sessions", "search", "deploy", "--json").output)
    assert doc["index_stale"] is False and {h["via"] for h in doc["hits"]} == {"fts"}


def test_reindex_of_a_stale_store_rebuilds_once(filled):
    with SessionDB.open() as db:
        with db.atomic() as conn:
            mark_stale(conn, "test", None)
    doc = json.loads(run("sessions", "reindex", "--json").stdout)  # stderr: a warning
    assert doc["was_stale"] is True and doc["messages"] == 3
    with SessionDB.open() as db:
        assert db.search_index_stale() is None and db.search_rebuilt_on_open is None


def test_search_cli_filters_and_order(hermes_home):
    with SessionDB.open() as db:
        db.create_session("a1", source="agent")
        db.create_session("c1", source="cli")
        db.append_messages("a1", [{"role": "user", "content": "backup plan one",
                                   "timestamp": 1_700_000_000.0},
                                  {"role": "user", "content": "backup plan two",
                                   "timestamp": 1_800_000_000.0}])
        db.append_messages("c1", [{"role": "user", "content": "backup plan cli",
                                   "timestamp": 1_800_000_000.0}])

    def ids(*args):
        res = CliRunner().invoke(cli, ["sessions", "search", "backup", "--json", *args])
        assert res.exit_code == 0, res.output
        return [h["snippet"].split()[-1] for h in json.loads(res.stdout)["hits"]]
    assert sorted(ids("--source", "agent")) == ["one", "two"]
    assert ids("--source", "agent", "--order", "oldest") == ["one", "two"]
    assert ids("--source", "agent", "--order", "newest") == ["two", "one"]
    assert sorted(ids("--since", "2025-01-01")) == ["cli", "two"]
    assert ids("--until", "2025-01-01") == ["one"]
    bad = CliRunner().invoke(cli, ["sessions", "search", "x", "--order", "best"])
    assert bad.exit_code == 2
