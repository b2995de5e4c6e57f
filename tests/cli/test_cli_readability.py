"""Human output a reader can use: tables that fit the terminal, search hits
that can be told apart and opened, highlights only where a terminal shows
them, clear errors for empty and dash-led queries, singular nouns for one."""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from hstate_cli.output import column_cap, fit_rows
from sessiondb import SessionDB

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, width: int = 120, **kw):
    env = {"COLUMNS": str(width), **kw.pop("env", {})}
    return CliRunner().invoke(cli, list(args), env=env, prog_name="hermes", **kw)


@pytest.fixture
def alike(hermes_home: Path) -> Path:
    """Three messages whose snippets look the same (the demo's case)."""
    with SessionDB.open() as db:
        db.create_session("s1", source="agent", title="Notes")
        db.append_messages("s1", [{"role": "user", "content": f"checkpoint starvation is bad. "
                                   f"the details that matter {i} " + "filler " * 40}
                                  for i in range(3)])
    return hermes_home


def test_search_hits_have_a_message_id_and_open_in_place(alike):
    res = run("sessions", "search", "checkpoint")
    assert res.exit_code == 0, res.output
    doc = json.loads(run("sessions", "search", "checkpoint", "--json").stdout)
    ids = [h["message_id"] for h in doc["hits"]]
    assert len(set(ids)) == 3
    lines = res.stdout.splitlines()
    assert lines[0].split()[:2] == ["session", "msg"]
    for mid in ids:
        assert any(line.split()[1:2] == [str(mid)] for line in lines[2:]), res.stdout
    assert lines[-2] == "3 hits; open one in place:"
    assert lines[-1].startswith("  hermes --home ")
    command = lines[-1].split()
    assert command[-3:] == ["s1", "--around", str(ids[0])]
    shown = run(*command[1:], env={"HERMES_HOME": "/nonexistent"})  # literally as printed
    assert shown.exit_code == 0, shown.output
    assert f">{ids[0]}" in shown.stdout


def test_show_around_gives_the_neighbours(hermes_home):
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        rids = db.append_messages("s1", [{"role": "user", "content": f"m{i}"} for i in range(9)])
        with db.atomic() as conn:
            conn.execute("UPDATE messages SET state = 'archived' WHERE id = ?", (rids[3],))
    doc = json.loads(run("sessions", "show", "s1", "--around", str(rids[4]), "--context", "2",
                         "--json").stdout)
    assert [m["content"] for m in doc["messages"]] == ["m1", "m2", "m4", "m5", "m6"]
    assert [r["id"] for r in doc["rows"]] == [rids[1], rids[2], rids[4], rids[5], rids[6]]
    doc = json.loads(run("sessions", "show", "s1", "--around", str(rids[4]), "--context", "1",
                         "--archived", "--json").stdout)
    assert [m["content"] for m in doc["messages"]] == ["m3", "m4", "m5"]
    # An archived hit opened without --archived is still shown itself.
    doc = json.loads(run("sessions", "show", "s1", "--around", str(rids[3]), "--context", "0",
                         "--json").stdout)
    assert [m["content"] for m in doc["messages"]] == ["m3"]
    edge = json.loads(run("sessions", "show", "s1", "--around", str(rids[0]), "--json").stdout)
    assert [m["content"] for m in edge["messages"]] == ["m0", "m1", "m2", "m4"]


def test_show_around_a_message_of_another_session_fails(hermes_home):
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        db.create_session("s2", source="t")
        (other,) = db.append_messages("s2", [{"role": "user", "content": "x"}])
    res = run("sessions", "show", "s1", "--around", str(other))
    assert res.exit_code == 1
    assert res.stderr.strip() == f"Error: session 's1' has no message {other}"
    res = run("sessions", "show", "nope", "--around", str(other))
    assert res.stderr.strip() == "Error: no session 'nope'"
    assert run("sessions", "show", "s1", "--around", "0").exit_code == 2


def _on_a_terminal(home: Path, *args: str) -> str:
    """Run the real CLI with stdout on a pseudo-terminal; what the terminal got."""
    master, slave = pty.openpty()
    env = {**os.environ, "HERMES_HOME": str(home), "COLUMNS": "120", "TERM": "xterm"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-c", "from cli.main import main; main()", *args],
                            stdout=slave, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    return b"".join(chunks).decode("utf-8")


def test_matches_are_bold_on_a_terminal_and_plain_on_a_pipe(alike):
    piped = run("sessions", "search", "starvation").stdout
    assert "**" not in piped and "\x1b" not in piped and "\ue000" not in piped
    assert "starvation" in piped
    shown = _on_a_terminal(alike, "sessions", "search", "starvation")
    assert "\x1b[1mstarvation\x1b[22m" in shown
    assert "**" not in shown


def test_stored_highlight_marks_and_asterisks_cannot_fake_attributes(hermes_home):
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        db.append_message("s1", {"role": "user", "content": "needle \ue000 fake \ue001 \x1b[1m"})
    shown = _on_a_terminal(hermes_home, "sessions", "search", "needle")
    assert shown.count("\x1b[1m") == 1  # only the match itself
    assert "\\ue000" in shown and "\\u001b[1m" in shown


#: a command printed to be pasted: a hint's own line, or doctor's numbered fix
#: (``(1) hermes ...``, ``    then: hermes ...``) below its table.
PRINTED_COMMAND = re.compile(r"^(  |\(\d+\) |    then: )hermes ")


def test_tables_fit_the_terminal(hermes_home):
    long_id = "a" * 120
    with SessionDB.open() as db:
        db.create_session(long_id, source="hstate_agent-with-a-long-source-name", title="t " * 80)
        db.append_message(long_id, {"role": "user", "content": "word " * 300})
    for width in (80, 120):
        for args in (("sessions", "list"), ("sessions", "show", long_id),
                     ("sessions", "search", "word"), ("doctor",), ("sessions", "stats")):
            res = run(*args, width=width)
            assert res.exit_code in (0, 3), (args, res.output)
            # Commands to paste are printed whole on their own line.
            too_wide = [line for line in res.stdout.splitlines()
                        if len(line) > width and not PRINTED_COMMAND.match(line)]
            assert not too_wide, (args, width, too_wide)
    listed = run("sessions", "list", width=80).stdout.splitlines()
    first = len(listed[1].split()[0])  # the id column's rule
    assert "".join(line[:first].strip() for line in listed[2:]) == long_id  # wrapped, not cut


def test_fit_rows_caps_only_the_wide_columns():
    assert column_cap([5, 10, 300], 120) == 105
    assert column_cap([5, 10], 120) is None
    assert column_cap([300, 300], 40) == 20
    rows, _heads = fit_rows([["ok", "x" * 50, "y" * 300]], ["a", "b", "c"], 150)
    assert rows[0][0] == "ok" and rows[0][1] == "x" * 50
    assert max(len(line) for line in rows[0][2].split("\n")) == 150 - 4 - 3 - 50


def test_words_are_kept_whole_when_wrapping_at_spaces_fits():
    rows, heads = fit_rows([["background_review", "claude-sonnet-5", "some words " * 10, 12]],
                           ["task", "model", "note", "cache read"], 70)
    assert rows[0][0] == "background_review" and rows[0][1] == "claude-sonnet-5"
    assert max(len(line) for line in rows[0][2].split("\n")) < len("some words " * 10)
    assert "\n" not in "".join(heads[:2])
    # When even whole words cannot fit, long words are broken rather than overflow.
    rows, _ = fit_rows([["a" * 100, "b" * 100]], ["x", "y"], 60)
    assert max(len(line) for c in rows[0] for line in c.split("\n")) <= 29


def test_empty_query_is_a_clear_usage_error(hermes_home):
    for query in ("", "   "):
        res = run("sessions", "search", query)
        assert res.exit_code == 2
        assert "Usage: hermes sessions search [OPTIONS] QUERY" in res.stderr
        assert res.stderr.strip().splitlines()[-1] == (
            "Error: Invalid value for 'QUERY': the query is empty; give a word or a "
            "\"quoted phrase\"")
    assert not hermes_home.exists()  # refused before the store was opened


def test_library_bad_input_shows_the_commands_own_usage(hermes_home):
    SessionDB.open().close()  # a store to search (reading commands never create one)
    res = run("sessions", "search", '""')
    assert res.exit_code == 2
    assert "Usage: hermes sessions search" in res.stderr
    assert "Usage: hermes [OPTIONS]" not in res.stderr


def test_dash_query_gets_a_hint_and_works_after_double_dash(hermes_home):
    with SessionDB.open() as db:
        db.create_session("s1", source="t")
        db.append_message("s1", {"role": "user", "content": "run it with -foo please"})
    res = run("sessions", "search", "-foo")
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines()[-1] == (
        "Error: No such option '-f'. To pass an argument that starts with '-', put '--' "
        "before it: hermes sessions search -- -foo")
    res = run("sessions", "search", "--json", "--", "-foo")
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["hits"]) == 1
    # Commands without arguments keep click's plain message.
    res = run("sessions", "stats", "-x")
    assert res.stderr.strip().splitlines()[-1] == "Error: No such option '-x'."
