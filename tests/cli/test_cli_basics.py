"""The hermes CLI skeleton: version, sessions list/show, doctor, errors, help."""
from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB


def run(*args: str, **kw):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, **kw)


@pytest.fixture
def filled(hermes_home):
    with SessionDB.open() as db:
        db.create_session("s1", source="agent", title="Trip planning")
        db.append_messages("s1", [
            {"role": "user", "content": "Where to go?"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c", "function": {"name": "search", "arguments": "{}"}}]},
        ])
    return hermes_home


def test_version_prints_sqlite():
    res = run("--version")
    assert res.exit_code == 0
    assert res.output.startswith("hermes 0.1.0 (SQLite 3.")


def test_list_table_and_json(filled):
    res = run("sessions", "list")
    assert res.exit_code == 0
    assert "s1" in res.output and "Trip planning" in res.output
    doc = json.loads(run("sessions", "list", "--json").output)
    assert [s["id"] for s in doc["sessions"]] == ["s1"]
    assert doc["sessions"][0]["message_count"] == 2


def test_show_folds_tool_calls_and_json_strips_markers(filled):
    res = run("sessions", "show", "s1")
    assert res.exit_code == 0
    assert "[tool call: search]" in res.output
    doc = json.loads(run("sessions", "show", "s1", "--json").output)
    assert doc["messages"][0] == {"role": "user", "content": "Where to go?"}


def test_home_flag_overrides_env(filled, tmp_path):
    other = tmp_path / "other"
    res = run("--home", str(other), "sessions", "list", "--json")
    # A reading command on a mistyped home: one line, exit 1, nothing created.
    assert (res.exit_code, res.output) == (1, f"Error: no store at {other / 'state.db'}\n")
    assert not other.exists()


def test_unknown_session_is_one_line_error_exit_1(filled):
    res = CliRunner().invoke(cli, ["sessions", "show", "nope"])
    assert res.exit_code == 1
    assert res.output.strip() == "Error: no session 'nope'"


def test_usage_errors_exit_2(filled):
    res = CliRunner().invoke(cli, ["sessions", "list", "--limit", "0"])
    assert res.exit_code == 2
    res = CliRunner().invoke(cli, ["--profile", "../x", "sessions", "list"])
    assert res.exit_code == 2
    assert "Error: Invalid value for --profile" in res.output
    res = CliRunner().invoke(cli, ["sessions", "list", "--bogus"])
    assert res.exit_code == 2


def test_home_that_is_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    res = CliRunner().invoke(cli, ["--home", str(f), "sessions", "list"])
    assert res.exit_code == 2
    assert f.read_text() == "x"


def test_doctor_on_fresh_home(hermes_home):
    res = run("doctor", "--json")  # no store yet: one info finding, nothing created
    assert res.exit_code == 0
    assert [f["id"] for f in json.loads(res.output)["findings"]] == ["store"]
    assert not (hermes_home / "state.db").exists()
    assert run("sessions", "list").exit_code == 1  # reading commands create nothing
    assert not (hermes_home / "state.db").exists()
    SessionDB.open(hermes_home).close()
    res = run("doctor", "--json")
    assert res.exit_code == 0
    doc = json.loads(res.output)
    assert doc["healthy"] is True
    assert {f["check"] for f in doc["findings"]} >= {"quick_check", "journal_mode", "schema"}


def test_doctor_on_non_database(hermes_home):
    hermes_home.mkdir(mode=0o700)
    (hermes_home / "state.db").write_bytes(b"garbage" * 1000)
    res = CliRunner().invoke(cli, ["doctor", "--json"])
    assert res.exit_code == 4
    doc = json.loads(res.output)
    assert doc["healthy"] is False
    opened = [f for f in doc["findings"] if f["id"] == "open"]
    assert opened and "--inspect-only" in opened[0]["fix"]
    assert (hermes_home / "state.db").read_bytes() == b"garbage" * 1000


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, cmd in group.commands.items():
        yield prefix + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + (name,))


def test_every_command_has_help_with_an_example():
    for path, cmd in _commands(cli):
        res = run(*path, "--help")
        assert res.exit_code == 0, path
        assert cmd.help and "Example" in cmd.help, path
