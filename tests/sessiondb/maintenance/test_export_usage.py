"""The usage ledger travels with `sessions export` / `sessions import`:
real stores, a real review billed through the local Messages API server,
the real CLI."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_agent import Agent, Reply
from hstate_agent.localmodel.server import LocalModelServer
from hstate_agent.review.review_config import ReviewConfig
from hstate_cli.main import cli
from sessiondb import SessionDB
from sessiondb.rows.usage import ledger_rows
from tests.helpers.review import TwoScripts, client_for

pytestmark = pytest.mark.both_backends


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def ledger(home: Path) -> dict[str, list[dict]]:
    with SessionDB.open(home) as db, db._read() as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY id")]
        return {sid: ledger_rows(conn, sid) for sid in ids}


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_lines(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def reviewed(hermes_home, tmp_path) -> tuple[str, Path]:
    """A session with a turn and a billed background review, exported."""
    script = TwoScripts([Reply.text("Noted.")], [
        Reply.tool("memory", {"action": "add", "target": "user", "content": "Uses WAL."}),
        Reply.text("Saved.")])
    with SessionDB.open() as db, LocalModelServer(script) as srv:
        agent = Agent(db, client=client_for(srv), review=ReviewConfig())
        agent.run_turn("I use WAL; remember that.")
        assert agent.reviewer.wait(10).billed
        db.record_auxiliary_usage(agent.session_id, task="title", model="m2",
                                  provider="anthropic", input_tokens=5, cost_usd=0.25)
    out = tmp_path / "backup.jsonl"
    res = run("sessions", "export", "--all", "-o", str(out))
    assert res.exit_code == 0, res.output
    return agent.session_id, out


def test_round_trip_carries_the_ledger_and_a_reimport_does_not_double_it(reviewed, hermes_home,
                                                                         tmp_path):
    sid, out = reviewed
    source = ledger(hermes_home)
    assert [r["task"] for r in source[sid]] == ["background_review", "title", "turn"]
    [session_line] = [r for r in lines_of(out) if r["type"] == "session"]
    assert session_line["usage"] == source[sid]
    fresh = tmp_path / "fresh"
    SessionDB.open(fresh).close()  # a dry run reads a store; it never creates one
    dry = run("--home", str(fresh), "sessions", "import", str(out), "--dry-run", "--json")
    assert json.loads(dry.stdout)["usage_rows_added"] == 3
    assert ledger(fresh) == {}
    first = run("--home", str(fresh), "sessions", "import", str(out), "--json")
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)
    assert (doc["usage_rows_in_file"], doc["usage_rows_added"]) == (3, 3)
    assert ledger(fresh) == source  # counters, cost, first/last times, byte for byte
    again = run("--home", str(fresh), "sessions", "import", str(out), "--json")
    assert json.loads(again.stdout)["usage_rows_added"] == 0
    assert ledger(fresh) == source
    with SessionDB.open(fresh) as db, SessionDB.open(hermes_home) as src:
        assert db.session_usage(sid) == src.session_usage(sid)
    human = run("--home", str(fresh), "sessions", "import", str(out))
    assert "usage rows" in human.output and human.exit_code == 0


def test_an_export_without_usage_imports_as_before_and_a_new_one_fills_the_gaps(
        reviewed, hermes_home, tmp_path):
    sid, out = reviewed
    old = [{k: v for k, v in r.items() if k != "usage"} for r in lines_of(out)]
    old_file = write_lines(tmp_path / "old.jsonl", old)
    fresh = tmp_path / "fresh"
    res = run("--home", str(fresh), "sessions", "import", str(old_file), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["sessions_created"], doc["usage_rows_in_file"], doc["usage_rows_added"]) == \
        (1, 0, 0)
    assert ledger(fresh) == {sid: []}
    # The session now exists; the newer export gives it the rows it lacks.
    res = run("--home", str(fresh), "sessions", "import", str(out), "--json")
    assert json.loads(res.stdout)["usage_rows_added"] == 3
    assert ledger(fresh) == ledger(hermes_home)


def test_a_ledger_row_the_store_has_is_kept_not_added_to(reviewed, hermes_home, tmp_path):
    sid, out = reviewed
    exported = {r["task"]: r for r in ledger(hermes_home)[sid]}
    with SessionDB.open(hermes_home) as db:  # the session goes on after the export
        db.record_auxiliary_usage(sid, task="title", model="m2", provider="anthropic",
                                  input_tokens=7)
    res = run("sessions", "import", str(out), "--json")
    assert json.loads(res.stdout)["usage_rows_added"] == 0
    now = {r["task"]: r for r in ledger(hermes_home)[sid]}
    assert now["title"]["input_tokens"] == exported["title"]["input_tokens"] + 7
    assert now["turn"] == exported["turn"]


@pytest.mark.parametrize("usage, error", [
    ({"task": "turn"}, "'usage' must be a list of ledger rows"),
    ([{"task": "Bad Task"}], "invalid usage task 'Bad Task'"),
    ([{"task": "turn", "input_tokens": -1}], "input_tokens must be a non-negative integer"),
    ([{"task": "turn", "tokens": 1}], "usage row has unknown fields: tokens"),
    ([{"task": "turn", "cost_usd": "free"}], "'cost_usd' must be a non-negative number"),
    ([{"task": "turn"}, {"task": "turn", "model": ""}], "more than once"),
])
def test_a_malformed_usage_list_is_refused_and_nothing_is_written(reviewed, tmp_path, usage,
                                                                  error):
    _sid, out = reviewed
    records = lines_of(out)
    line = next(i for i, r in enumerate(records, 1) if r["type"] == "session")
    records[line - 1]["usage"] = usage
    bad = write_lines(tmp_path / "bad.jsonl", records)
    fresh = tmp_path / "fresh"
    SessionDB.open(fresh).close()  # an empty store to compare against
    before = hashlib.sha256((fresh / "state.db").read_bytes()).hexdigest()
    res = run("--home", str(fresh), "sessions", "import", str(bad))
    assert res.exit_code == 1
    assert res.output.strip().splitlines()[-1].startswith(f"Error: line {line}: ")
    assert error in res.output and "Traceback" not in res.output
    assert hashlib.sha256((fresh / "state.db").read_bytes()).hexdigest() == before
    assert ledger(fresh) == {}
