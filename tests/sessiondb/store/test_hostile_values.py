"""Values a reader cannot read back are refused where they enter: times out
of the documented range, JSON nested too deep, integers of more than 4,300
digits, counters that do not match the rows. Rows already stored with such
values (written before these checks) do not crash any reader."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.demo import damage_copy, seed_history
from hstate_cli.main import cli
from sessiondb import InvalidInput, InvalidMessage, SessionDB
from sessiondb.rows.codec import MAX_DEPTH, MAX_TIME, MIN_TIME

pytestmark = pytest.mark.both_backends

BAD_TIMES = [1e300, -1e300, math.inf, -math.inf, math.nan, 10**5000, MAX_TIME + 1,
             MIN_TIME - 1, True, "2026-01-01"]


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def rows(db: SessionDB) -> list[tuple]:
    with db._read() as conn:
        return list(conn.execute("SELECT session_id, uid FROM messages"))


@pytest.mark.parametrize("ts", BAD_TIMES, ids=lambda v: f"{v!r:.20}" if not isinstance(v, int) or abs(v) < 10**100 else "huge-int")
def test_out_of_range_message_times_are_refused(db, sid, ts):
    with pytest.raises(InvalidMessage) as caught:
        db.append_messages(sid, [{"role": "user", "content": "ok"},
                                 {"role": "user", "content": "x", "timestamp": ts}])
    assert caught.value.field == "timestamp" and caught.value.index == 1
    assert rows(db) == []  # all or nothing
    assert db.get_session(sid).message_count == 0


def test_the_edges_of_the_range_are_stored_and_read(db, sid):
    db.append_messages(sid, [{"role": "user", "content": "a", "timestamp": MIN_TIME},
                             {"role": "user", "content": "b", "timestamp": MAX_TIME}])
    res = run("sessions", "show", sid)
    assert res.exit_code == 0 and "9999-12-31" in res.stdout


@pytest.mark.parametrize("clock", [lambda: 1e300, lambda: math.nan])
def test_a_clock_out_of_range_cannot_stamp_sessions(hermes_home, clock):
    with SessionDB.open() as good:
        good.create_session("s1", source="t")
    with SessionDB.open(clock=clock) as db:
        with pytest.raises(InvalidInput, match="the store's clock must be epoch seconds"):
            db.create_session("s2", source="t")
        with pytest.raises(InvalidInput):
            db.end_session("s1")
        with pytest.raises(InvalidInput):
            db.append_message("s1", {"role": "user", "content": "x", "timestamp": 5.0})
        assert [s.id for s in db.list_sessions()] == ["s1"]
        assert db.get_session("s1").ended_at is None


@pytest.fixture
def stored_overflow(hermes_home: Path) -> Path:
    """Rows written before times were checked: 1e300 in session and message times."""
    with SessionDB.open() as db:
        db.create_session("s1", source="t", title="big")
        db.create_session("s2", source="t", title="fine")
        db.append_messages("s1", [{"role": "user", "content": "needle one"},
                                  {"role": "user", "content": "needle two"}])
        with db.atomic() as conn:
            conn.execute("UPDATE sessions SET started_at = 1e300, ended_at = -1e300"
                         " WHERE id = 's1'")
            conn.execute("UPDATE messages SET timestamp = 1e300 WHERE content = 'needle one'")
            conn.execute("UPDATE messages SET timestamp = -1e300 WHERE content = 'needle two'")
    return hermes_home


@pytest.mark.parametrize("args", [
    ("sessions", "list"), ("sessions", "list", "--json"), ("sessions", "show", "s1"),
    ("sessions", "show", "s1", "--json"), ("sessions", "search", "needle"),
    ("sessions", "export", "s1", "--format", "markdown"), ("sessions", "export", "--all"),
    ("sessions", "export", "s1", "--format", "json"), ("sessions", "stats"), ("doctor",),
])
def test_readers_survive_rows_already_stored_out_of_range(stored_overflow, args):
    res = run(*args)
    assert res.exit_code in (0, 3), res.output
    assert "Traceback" not in res.output and "OverflowError" not in res.output
    if args[:2] == ("sessions", "show") and "--json" not in args:
        assert "1e+300 (out of range)" in res.stdout


def test_an_export_of_stored_bad_times_is_refused_on_import(stored_overflow, tmp_path):
    out = tmp_path / "x.jsonl"
    assert run("sessions", "export", "--all", "-o", str(out)).exit_code == 0
    res = run("--home", str(tmp_path / "other"), "sessions", "import", str(out))
    assert res.exit_code == 1
    assert "must be epoch seconds between 0001-01-01 and 9999-12-31 UTC" in res.stderr


@pytest.mark.parametrize("field", ["content", "tool_calls", "extra"])
def test_deep_nesting_is_invalid_message_not_recursion_error(db, sid, field):
    deep = nested(10_000)
    message = {"role": "assistant", "content": "x", field: deep}
    with pytest.raises(InvalidMessage, match="nested more than 100 levels deep"):
        db.append_messages(sid, [message])
    assert rows(db) == []


def test_nesting_up_to_the_limit_is_stored_and_read_back(db, sid):
    ok = {"role": "user", "content": [{"type": "text", "text": "x", "deep": nested(MAX_DEPTH - 2)}]}
    db.append_message(sid, ok)
    assert db.get_messages(sid)[0]["content"] == ok["content"]
    with pytest.raises(InvalidMessage):
        db.append_message(sid, {"role": "user", "content": [{"deep": nested(MAX_DEPTH)}]})


@pytest.mark.parametrize("where", ["extra", "content", "tool_calls"])
@pytest.mark.parametrize("raised_limit", [False, True])
def test_huge_integers_are_invalid_message(db, sid, where, raised_limit):
    huge = 10**5000
    value = {"extra": huge, "content": [{"type": "x", "n": huge}],
             "tool_calls": [{"id": "c", "n": -huge}]}[where]
    old = sys.get_int_max_str_digits()
    if raised_limit:  # a host process that lifted Python's own guard
        sys.set_int_max_str_digits(0)
    try:
        with pytest.raises(InvalidMessage, match="more than 4,300 digits"):
            db.append_message(sid, {"role": "user", "content": "x", where: value}
                              if where != "content" else {"role": "user", "content": value})
    finally:
        sys.set_int_max_str_digits(old)
    assert rows(db) == []
    db.append_message(sid, {"role": "user", "content": "x", "extra": 10**4299})


@pytest.mark.parametrize("count", [2**63, -(2**63) - 1, 10**30])
def test_token_count_must_fit_its_column(db, sid, count):
    with pytest.raises(InvalidMessage) as caught:
        db.append_message(sid, {"role": "user", "content": "x", "token_count": count})
    assert caught.value.field == "token_count"


# -- import ----------------------------------------------------------------

def export_lines(sessions: list[dict], messages: list[dict]) -> list[str]:
    header = {"type": "header", "format": "hermes-export", "version": 1,
              "exported_at": "2026-01-01T00:00:00Z"}
    out = [json.dumps(header)]
    for s in sessions:
        out.append(json.dumps({"type": "session", "session": s}))
        out += [json.dumps({"type": "message", **m}) for m in messages
                if m["session_id"] == s["id"]]
    out.append(json.dumps({"type": "end", "sessions": len(sessions), "messages": len(messages)}))
    return out


def session_row(sid: str = "s1", **kw) -> dict:
    row = {"id": sid, "source": "t", "started_at": 1.0, "updated_at": 2.0, "ended_at": None,
           "message_count": 0, "tool_call_count": 0}
    return {**row, **kw}


def message_row(sid: str = "s1", uid: str = "u1", **kw) -> dict:
    row = {"session_id": sid, "uid": uid, "timestamp": 1.5, "state": "active",
           "compaction_id": None, "kind": "message",
           "message": {"role": "user", "content": "hi"}}
    return {**row, **kw}


def import_lines(tmp_path: Path, lines: list[str]):
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return run("sessions", "import", str(path))


@pytest.mark.parametrize("session, message, line, error", [
    (session_row(started_at=1e300), None, 2, "session 'started_at' must be epoch seconds"),
    (session_row(updated_at=-1e300), None, 2, "session 'updated_at' must be epoch seconds"),
    (session_row(ended_at=1e300), None, 2, "session 'ended_at' must be epoch seconds"),
    (session_row(), message_row(timestamp=1e300), 3, "message 'timestamp' must be epoch"),
    (session_row(), message_row(timestamp=-1e300), 3, "message 'timestamp' must be epoch"),
    (session_row(), message_row(message={"role": "user", "content": "x",
                                          "timestamp": 1e300}), 3, "'timestamp'"),
    (session_row(message_count=2**64), None, 2, "must be a non-negative 64-bit integer"),
    (session_row(input_tokens=-1), None, 2, "must be a non-negative 64-bit integer"),
])
def test_import_refuses_values_out_of_range(hermes_home, tmp_path, session, message, line,
                                            error):
    res = import_lines(tmp_path, export_lines([session], [message] if message else []))
    assert res.exit_code == 1, res.output
    assert res.stderr.startswith(f"Error: line {line}: ") and error in res.stderr, res.stderr
    assert not (hermes_home / "state.db").exists() or run(
        "sessions", "list", "--json").stdout.count('"id"') == 0


@pytest.mark.parametrize("raw, error", [
    ("[" * 10_000 + "]" * 10_000, "nested too deeply"),
    ("1" * 5000, "4300"),
])
def test_import_of_unreadable_json_lines_is_one_error_line(hermes_home, tmp_path, raw, error):
    lines = export_lines([session_row()], [message_row()])
    lines.insert(3, raw)
    res = import_lines(tmp_path, lines)
    assert res.exit_code == 1, res.output
    assert res.stderr.startswith("Error: line 4: not ") and error in res.stderr, res.stderr
    assert "Traceback" not in res.output


def test_import_of_a_deep_message_is_refused_on_its_line(hermes_home, tmp_path):
    deep = {"role": "user", "content": [{"type": "text", "text": "x", "d": nested(500)}]}
    res = import_lines(tmp_path, export_lines([session_row()], [message_row(message=deep)]))
    assert res.exit_code == 1
    assert res.stderr.startswith("Error: line 3: message field 'content' is nested more than")


def test_import_derives_counters_from_the_rows(hermes_home, tmp_path):
    calls = {"role": "assistant", "content": None,
             "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}},
                            {"id": "b", "function": {"name": "g", "arguments": "{}"}}]}
    lines = export_lines([session_row("empty", message_count=999999, tool_call_count=5),
                          session_row("two", message_count=7, tool_call_count=0)],
                         [message_row("two", "u1"), message_row("two", "u2", message=calls)])
    res = import_lines(tmp_path, lines)
    assert res.exit_code == 0, res.output
    with SessionDB.open() as db:
        assert (db.get_session("empty").message_count,
                db.get_session("empty").tool_call_count) == (0, 0)
        assert (db.get_session("two").message_count,
                db.get_session("two").tool_call_count) == (2, 2)
    listed = run("sessions", "list").stdout
    assert "999999" not in listed


def test_recovered_sessions_count_what_was_recovered(tmp_path):
    home = tmp_path / "home"
    seed_history(home, messages=600)
    copy, _page = damage_copy(home / "state.db", tmp_path / "damaged")
    out = tmp_path / "recovered.db"
    res = run("sessions", "recover", "--source", str(copy), "--output", str(out),
              "--allow-partial")
    assert res.exit_code == 3, res.output  # recovered with loss
    with SessionDB(out) as db:
        with db._read() as conn:
            (real,) = conn.execute("SELECT count(*) FROM messages").fetchone()
        session = db.get_session("demo-history")
    assert real < 600
    assert session.message_count == real
    recovered_home = tmp_path / "rhome"
    recovered_home.mkdir(mode=0o700)
    out.rename(recovered_home / "state.db")
    res = run("--home", str(recovered_home), "sessions", "show", "demo-history")
    assert f"{real} messages" in res.stdout.splitlines()[0]


def test_spooled_messages_with_out_of_range_times_are_bad_lines(db, sid):
    from sessiondb.importers.spool_import import import_spool, spool_dir_for
    spool = spool_dir_for(db.path)
    spool.mkdir(mode=0o700, exist_ok=True)  # the store made it for its space reserve
    lines = [{"kind": "session", "version": 1, "session_id": sid},
             {"kind": "message", "session_id": sid, "uid": "u1", "timestamp": 1e300,
              "message": {"role": "user", "content": "x"}}]
    (spool / f"{sid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    report = import_spool(db)
    assert report.files[0].bad_lines == [2]
    assert rows(db) == []


@pytest.mark.parametrize("ttl", [math.inf, 1e300, 10**5000, 367 * 86400, True, 0, -1],
                         ids=["inf", "1e300", "huge-int", "367d", "True", "0", "-1"])
def test_lease_ttls_out_of_range_are_refused(db, sid, ttl):
    with pytest.raises(InvalidInput, match="a lease ttl must be"):
        db.acquire_lease(sid, "me", ttl)
    db.acquire_lease(sid, "me", 365 * 86400)
