"""The usage ledger: turns, auxiliary usage, compaction billing, CLI output."""
from __future__ import annotations

import json

import anthropic
import pytest
from click.testing import CliRunner

from hstate_agent import Agent, CompactionPolicy
from hstate_agent.localmodel.server import LocalModelServer
from hstate_agent.localmodel.scripted import calc_registry, exchange_script
from hstate_agent.compact import SUMMARY_SYSTEM
from hstate_cli.main import cli
from sessiondb import SessionDB
from sessiondb.engine.migrations import applied
from sessiondb.pg import migrations as pg_migrations

pytestmark = pytest.mark.both_backends


def rows(db, sid):
    return {(r.task, r.model, r.provider): r for r in db.session_usage(sid)}


def test_record_usage_keeps_session_counters_and_writes_the_turn_row(db, sid, backend):
    db.record_usage(sid, input_tokens=10, output_tokens=3, api_calls=1)
    db.record_usage(sid, input_tokens=5, output_tokens=2, cache_read_tokens=7, api_calls=2,
                    model="m2", provider="anthropic")
    s = db.get_session(sid)
    assert (s.input_tokens, s.output_tokens, s.cache_read_tokens) == (15, 5, 7)
    got = rows(db, sid)
    assert got[("turn", "m", "")].input_tokens == 10  # the session's model by default
    assert got[("turn", "m2", "anthropic")].api_calls == 2
    with db._read() as conn:
        names = applied(conn) if backend == "sqlite" else pg_migrations.applied(conn.raw)
    assert ("m007_usage_ledger" if backend == "sqlite" else "p007_usage_ledger") in names


def test_auxiliary_usage_touches_only_the_ledger(db, sid):
    db.append_messages(sid, [{"role": "user", "content": "hi"}])
    with db._read() as conn:
        before = (list(conn.execute("SELECT * FROM sessions")),
                  list(conn.execute("SELECT * FROM messages")))
    assert db.record_auxiliary_usage(sid, task="background_review", model="m",
                                     provider="anthropic", input_tokens=100, output_tokens=9,
                                     api_calls=2, cost_usd=0.01)
    assert db.record_auxiliary_usage(sid, task="background_review", model="m",
                                     provider="anthropic", input_tokens=1, api_calls=1)
    assert not db.record_auxiliary_usage(sid, task="title", model="m")  # nothing spent
    with db._read() as conn:
        after = (list(conn.execute("SELECT * FROM sessions")),
                 list(conn.execute("SELECT * FROM messages")))
    assert after == before
    [row] = db.session_usage(sid)
    assert (row.task, row.input_tokens, row.api_calls, row.cost_usd) == (
        "background_review", 101, 3, 0.01)


@pytest.mark.parametrize("call", [
    dict(session_id="nope", task="compaction", input_tokens=1),
    dict(session_id="s1", task="Bad Task", input_tokens=1),
    dict(session_id="s1", task="compaction", input_tokens=-1),
    dict(session_id="s1", task="compaction", made_up=1),
])
def test_auxiliary_usage_never_raises(db, sid, call, caplog):
    assert db.record_auxiliary_usage(**call) is False
    assert "could not record" in caplog.text
    assert db.session_usage(sid) == []


def test_auxiliary_usage_on_a_closed_store_is_logged_not_raised(open_store, caplog):
    db = open_store()
    sid = db.create_session(source="t")
    db.close()
    assert db.record_auxiliary_usage(sid, task="compaction", input_tokens=1) is False


def test_deleting_a_session_deletes_its_ledger(db, sid):
    db.record_usage(sid, input_tokens=1)
    db.delete_session(sid)
    assert db.usage_totals() == []


def test_compaction_summaries_are_billed_as_compaction_not_as_the_turn(db):
    summary_requests = []

    def script(request):
        if request.get("system") == SUMMARY_SYSTEM:
            summary_requests.append(request)
        return exchange_script(request)
    with LocalModelServer(script) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="k", max_retries=0)
        agent = Agent(db, client=client, tools=calc_registry(),
                      micro_compact=CompactionPolicy(token_threshold=300, keep_tail=2))
        turn_calls = 0
        for i in range(5):
            result = agent.run_turn(f"compute {i}")
            turn_calls += result.usage.api_calls
    assert summary_requests
    got = {r.task: r for r in db.session_usage(agent.session_id)}
    assert got["compaction"].api_calls == len(summary_requests)
    assert got["turn"].api_calls == turn_calls == 10
    assert db.get_session(agent.session_id).input_tokens == got["turn"].input_tokens


def test_cli_show_usage_and_stats(hermes_home):
    with SessionDB.open(hermes_home) as db:
        sid = db.create_session("u1", source="t", model="m")
        db.record_usage(sid, input_tokens=10, output_tokens=2, api_calls=1, provider="anthropic")
        db.record_auxiliary_usage(sid, task="background_review", model="m",
                                  provider="anthropic", input_tokens=30, api_calls=2)
    runner = CliRunner()
    out = runner.invoke(cli, ["sessions", "show", "u1", "--usage", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["usage"]["by_task"]["background_review"]["input_tokens"] == 30
    assert doc["usage"]["total"]["api_calls"] == 3
    assert [r["task"] for r in doc["usage"]["rows"]] == ["turn", "background_review"]
    human = runner.invoke(cli, ["sessions", "show", "u1", "--usage"])
    assert human.exit_code == 0 and "background_review" in human.output
    stats = json.loads(runner.invoke(cli, ["sessions", "stats", "--json"]).output)
    assert stats["usage"]["total"]["input_tokens"] == 40
    missing = runner.invoke(cli, ["sessions", "show", "nope", "--usage"])
    assert missing.exit_code == 1 and missing.output.startswith("Error: ")


def test_recover_carries_the_ledger_over(tmp_path):
    from hstate_recovery.salvage.pipeline import recover
    src = tmp_path / "src"
    src.mkdir(mode=0o700)
    with SessionDB(src / "state.db") as db:
        sid = db.create_session("r1", source="t", model="m")
        db.append_messages(sid, [{"role": "user", "content": "hi"}])
        db.record_usage(sid, input_tokens=5, api_calls=1)
        db.record_auxiliary_usage(sid, task="background_review", model="m", input_tokens=7,
                                  api_calls=1)
        expected = db.session_usage(sid)
    recover(src / "state.db", tmp_path / "out.db")
    with SessionDB(tmp_path / "out.db") as out:
        assert out.session_usage("r1") == expected


def test_the_carver_knows_the_ledger_layout():
    from hstate_recovery.schema.layouts import KNOWN_LAYOUTS, best_fit
    row = ["s1", "background_review", "m", "anthropic", 10, 2, 0, 0, 0, 1, None,
           1.7e9, 1.7e9]
    classes = ["text", "text", "text", "text", *["integer"] * 6, "null", "real", "real"]
    layout, score = best_fit(row, classes, KNOWN_LAYOUTS)
    assert layout.table == "usage_ledger" and score == 1.0
