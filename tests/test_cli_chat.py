"""`hermes chat` through the CLI with the offline local model."""
from __future__ import annotations

from click.testing import CliRunner

from cli.main import cli
from sessiondb import SessionDB, strip_markers


def test_one_shot_offline_turn_is_stored(hermes_home):
    res = CliRunner().invoke(cli, ["chat", "--offline", "-q", "hello there"])
    assert res.exit_code == 0, res.output
    assert "You said: hello there" in res.stdout
    with SessionDB.open() as db:
        (session,) = db.list_sessions()
        assert session.source == "cli"
        msgs = strip_markers(db.get_messages(session.id))
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    assert msgs[0]["content"] == "hello there"


def test_resume_continues_the_same_session(hermes_home):
    CliRunner().invoke(cli, ["chat", "--offline", "-q", "first"])
    with SessionDB.open() as db:
        (session,) = db.list_sessions()
    res = CliRunner().invoke(cli, ["chat", "--offline", "--resume", session.id, "-q", "second"])
    assert res.exit_code == 0
    with SessionDB.open() as db:
        contents = [m["content"] for m in db.get_messages(session.id) if m["role"] == "user"]
    assert contents == ["first", "second"]


def test_interactive_reads_until_eof(hermes_home):
    res = CliRunner().invoke(cli, ["chat", "--offline"], input="one\ntwo\n")
    assert res.exit_code == 0
    assert res.stdout.count("You said:") == 2


def test_without_a_key_says_how_to_try_offline(hermes_home, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    res = CliRunner().invoke(cli, ["chat", "-q", "hi"])
    assert res.exit_code == 1
    assert res.stderr.strip().splitlines()[-1] == (
        "Error: ANTHROPIC_API_KEY is not set; use --offline to try the local scripted model")


def test_resume_of_unknown_session(hermes_home):
    res = CliRunner().invoke(cli, ["chat", "--offline", "--resume", "nope", "-q", "x"])
    assert res.exit_code == 1
    assert "Error: no session 'nope'" in res.stderr


def test_compaction_switch(hermes_home, monkeypatch):
    from agent import Agent
    seen = []
    real_init = Agent.__init__

    def spy(self, *a, **kw):
        seen.append(kw.get("micro_compact"))
        real_init(self, *a, **kw)
    monkeypatch.setattr(Agent, "__init__", spy)
    CliRunner().invoke(cli, ["chat", "--offline", "-q", "a"])
    CliRunner().invoke(cli, ["chat", "--offline", "--no-compact", "-q", "b"])
    monkeypatch.setenv("HERMES_MICRO_COMPACT", "off")
    CliRunner().invoke(cli, ["chat", "--offline", "-q", "c"])
    assert [p is not None and p.enabled for p in seen] == [True, False, False]
