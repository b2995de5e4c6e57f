"""`hermes demo`: the README's main job, end to end on a fresh home."""
from __future__ import annotations

import os
import stat

from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB


def test_demo_runs_every_step(tmp_path):
    home = tmp_path / "parent" / "demo"  # a missing parent, created like the home
    old = os.umask(0)  # the most permissive umask: the modes must not depend on it
    try:
        res = CliRunner().invoke(cli, ["demo", "--home", str(home)])
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.output
    for made in (home.parent, home):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700, made
    out = res.stdout
    for command in ("chat --offline -q", "sessions search", "sessions recover --source",
                    "--inspect-only", "--output", "doctor"):
        assert f"$ hermes --home {home}" in out and command in out, command
    assert "Here is what I found" in out and "AttributeError" not in out
    # The review after the chat step saved a memory and is billed to that session.
    assert "[review] User profile updated" in res.stderr
    assert "background_review" in out and "The user said: I keep my notes" in out
    with SessionDB.open(home) as db:
        chat = db.list_sessions(source="cli")[-1]
        assert "background_review" in {r.task for r in db.session_usage(chat.id)}
        assert [m["role"] for m in db.get_messages(chat.id)] == ["user", "assistant"]
    assert "FTS5" in out and "--around" in out  # hits open in place
    assert "verdict: structural" in out and "verification: ok" in out
    # The healthy store was never touched by the damage step.
    with SessionDB.open(home) as db:
        assert db.quick_check() == ["ok"]
        assert db.get_session("demo-history").message_count == 600
    assert (home / "recovered.db").exists()


def test_demo_refuses_a_non_empty_home(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    res = CliRunner().invoke(cli, ["demo", "--home", str(tmp_path)])
    assert res.exit_code == 2
    assert "is not empty" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
