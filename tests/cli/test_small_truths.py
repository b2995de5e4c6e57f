"""Smaller truths the CLI tells: a line separator is shown as cli.md says
(``\\u2028``, not a space), and a chat that stores nothing leaves no session."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB


def test_show_spells_a_line_separator(hermes_home: Path) -> None:
    with SessionDB.open(hermes_home) as db:
        db.create_session("s", source="t")
        db.append_messages("s", [{"role": "user", "content": "a\u2028b\u0085c"}])
    res = CliRunner().invoke(cli, ["--home", str(hermes_home), "sessions", "show", "s"])
    assert res.exit_code == 0
    assert "a\\u2028b\\u0085c" in res.output, res.output


def test_an_empty_chat_on_stdin_leaves_no_session(hermes_home: Path) -> None:
    res = CliRunner().invoke(cli, ["--home", str(hermes_home), "chat", "--offline"], input="\n")
    assert res.exit_code == 0, res.output
    with SessionDB.open(hermes_home) as db:
        assert db.list_sessions() == []
