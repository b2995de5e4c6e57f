"""`hermes chat` through the CLI with the offline local model."""
from __future__ import annotations

import json

from click.testing import CliRunner

from hstate_cli.main import cli
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
    from hstate_agent import Agent
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


def _memory_entries(home):
    from hstate_agent.memory.memory import MemoryStore
    return [(e.text, e.origin) for e in MemoryStore(home).entries("user")]


def test_one_shot_review_saves_a_memory_before_exit(hermes_home):
    res = CliRunner().invoke(cli, ["chat", "--offline", "-q", "I use WAL; remember that."])
    assert res.exit_code == 0, res.output
    assert "[review] User profile updated" in res.stderr
    assert _memory_entries(hermes_home) == [("The user said: I use WAL.", "background_review")]


def test_no_review_flag_env_and_config_turn_it_off(hermes_home, monkeypatch):
    text = "I use WAL; remember that."
    assert CliRunner().invoke(cli, ["chat", "--offline", "--no-review", "-q", text]).exit_code == 0
    monkeypatch.setenv("HERMES_REVIEW", "off")
    assert CliRunner().invoke(cli, ["chat", "--offline", "-q", text]).exit_code == 0
    monkeypatch.delenv("HERMES_REVIEW")
    (hermes_home / "config.toml").write_text("[review]\nenabled = false\n")
    res = CliRunner().invoke(cli, ["chat", "--offline", "-q", text])
    assert res.exit_code == 0 and "[review]" not in res.stderr
    assert _memory_entries(hermes_home) == []


def test_refine_in_interactive_chat_runs_even_when_review_is_off(hermes_home):
    res = CliRunner().invoke(cli, ["chat", "--offline", "--no-review"],
                             input="I use WAL; remember that.\n/refine the user's setup\n")
    assert res.exit_code == 0, res.output
    assert res.stderr.count("[review] User profile updated") == 1
    assert _memory_entries(hermes_home) == [("The user said: I use WAL.", "refine_review")]


def test_memory_and_skills_commands(hermes_home):
    from hstate_agent.memory.memory import MemoryStore, Provenance
    from hstate_agent.memory.memory_pending import PendingChanges
    from hstate_agent.memory.skills import SkillStore
    store = MemoryStore(hermes_home)
    store.add("memory", "old fact", Provenance("user"))
    change = PendingChanges(store).stage("replace", "memory", "old fact", "new fact",
                                         Provenance("background_review", "s1"))
    SkillStore(hermes_home).create("demo", "---\nname: demo\ndescription: d\n---\nbody\n",
                                   Provenance("assistant_tool", "s1"))
    run = CliRunner().invoke
    shown = json.loads(run(cli, ["memory", "show", "--json"]).stdout)
    assert [e["text"] for e in shown["entries"]] == ["old fact"]
    pending = json.loads(run(cli, ["memory", "pending", "--json"]).stdout)
    assert pending["count"] == 1 and pending["changes"][0]["id"] == change.id
    bad = run(cli, ["memory", "apply"])
    assert bad.exit_code == 2
    res = run(cli, ["memory", "apply", change.id, "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["results"][0]["applied"]
    assert [e.text for e in store.entries("memory")] == ["new fact"]
    res = run(cli, ["memory", "discard", "nothere"])
    assert res.exit_code == 1 and res.stderr.strip() == "Error: no pending change 'nothere'"
    skills = json.loads(run(cli, ["skills", "list", "--json"]).stdout)
    assert skills == {"count": 1, "skills": [{"name": "demo", "description": "d"}]}
    shown = json.loads(run(cli, ["skills", "show", "demo", "--json"]).stdout)
    assert shown["provenance"][0]["origin"] == "assistant_tool"
    res = run(cli, ["skills", "show", "Bad/Name"])
    assert res.exit_code == 1 and res.stderr.startswith("Error: invalid skill name")


def test_chat_says_when_memory_changes_wait(hermes_home):
    from hstate_agent.memory.memory import MemoryStore, Provenance
    from hstate_agent.memory.memory_pending import PendingChanges
    store = MemoryStore(hermes_home)
    store.add("memory", "a fact", Provenance("user"))
    PendingChanges(store).stage("remove", "memory", "a fact", "", Provenance("background_review"))
    res = CliRunner().invoke(cli, ["chat", "--offline", "--no-review", "-q", "hi"])
    assert res.exit_code == 0
    assert "[1 memory change(s) proposed by a review wait for you: hermes memory pending]" \
        in res.stderr
