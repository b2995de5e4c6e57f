"""A full disk on a real 2 MiB filesystem: the spool keeps its promise, or says
truthfully that it could not, and hands the messages back.

Before the space reserve, the store's -wal took the space freed by the
failed write, the spool file was left at 0 bytes, a traceback was logged per
failed batch, and the explanation said the messages were "kept in the
spool" when they were nowhere.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB, StorageError, import_spool, strip_markers
from sessiondb.base.errors import Cause
from sessiondb.base.explain import describe_error
from sessiondb.importers.spool_import import spool_dir_for
from sessiondb.spool.spool_reserve import RESERVE_BYTES, reserve_path
from tests.helpers.tinyfs import fill, tiny_fs  # noqa: F401 (fixture)

TEXT = "y" * 3000


def append_until_full(db: SessionDB, sid: str, limit: int = 400) -> tuple[list[str],
                                                                          StorageError]:
    acked = []
    for i in range(limit):
        content = f"{i}:{TEXT}"
        try:
            db.append_messages(sid, [{"role": "user", "content": content}])
        except StorageError as e:
            return acked, e
        acked.append(content)
    raise AssertionError("the disk never filled up")


def spooled(db: SessionDB) -> list[str]:
    out = []
    for path in sorted(spool_dir_for(db.path).glob("*.jsonl")):
        out += [json.loads(ln)["message"]["content"] for ln in path.read_text().splitlines()
                if json.loads(ln).get("kind") == "message"]
    return out


def test_the_reserve_is_made_at_open_0600(tiny_fs: Path) -> None:
    with SessionDB.open(tiny_fs / "home"):
        pass
    reserve = reserve_path(tiny_fs / "home" / "spool")
    st = os.stat(reserve)
    assert oct(st.st_mode & 0o777) == "0o600" and st.st_size == 0
    assert st.st_blocks * 512 >= RESERVE_BYTES  # held past the end of the file


def test_a_full_disk_spools_the_failed_batch_and_nothing_acknowledged_is_lost(
        tiny_fs: Path, caplog: pytest.LogCaptureFixture) -> None:
    home = tiny_fs / "home"
    with SessionDB.open(home) as db:
        sid = db.create_session("s1", source="test")
        filler = fill(tiny_fs)
        acked, err = append_until_full(db, sid)
        assert err.cause is Cause.DISK_FULL
        assert err.spooled_to and err.unsaved == ()
        failed = f"{len(acked)}:{TEXT}"
        assert spooled(db) == [failed]  # the whole line, not a 0-byte file
        text = describe_error(err, home=home).summary
        assert "kept in the spool" in text and err.spooled_to in text
        assert not any(r.exc_info for r in caplog.records)  # no traceback per batch
        filler.unlink()
        report = import_spool(db)
        assert report.imported == 1
        moved = Path(report.files[0].moved_to)  # the adopted reserve's spare blocks
        assert moved.stat().st_blocks * 512 < RESERVE_BYTES  # were given back
        stored = [m["content"] for m in strip_markers(db.get_messages(sid))]
    assert stored == acked + [failed]  # 0 acknowledged lost, the spooled one back once


def test_when_the_spool_cannot_take_it_the_messages_are_handed_back(
        tiny_fs: Path, caplog: pytest.LogCaptureFixture) -> None:
    home = tiny_fs / "home"
    with SessionDB.open(home) as db:
        sid = db.create_session("s1", source="test")
        reserve_path(spool_dir_for(db.path)).unlink()  # no space held back
        fill(tiny_fs)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            acked, err = append_until_full(db, sid)
        assert err.cause is Cause.DISK_FULL and err.spooled_to is None
        assert [m["content"] for m in err.unsaved] == [f"{len(acked)}:{TEXT}"]
        failure = describe_error(err, home=home)
        assert "could not be saved anywhere" in failure.summary
        assert "kept in the spool" not in failure.summary
        assert not any("import-spool" in a for a in failure.actions)
        # No empty or torn spool file is left to warn about forever.
        assert not list(spool_dir_for(db.path).glob("*.jsonl"))
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and warnings[0].exc_info is None
        assert "could not be saved anywhere" in warnings[0].getMessage()


def test_disk_full_at_open_is_disk_full_not_a_failing_disk(tiny_fs: Path) -> None:
    home = tiny_fs / "home"
    with SessionDB.open(home) as db:
        db.create_session("s1", source="test")
    fill(tiny_fs)  # closed cleanly: the next open must create the -shm
    res = CliRunner().invoke(cli, ["--home", str(home), "sessions", "list"])
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert lines[1].startswith(f"The disk holding {home / 'state.db'} is full")
    assert "failing" not in res.output and "spool" not in res.output
    assert lines[2] == f"Next: hermes --home {home} doctor"
    res = CliRunner().invoke(cli, ["--home", str(home), "doctor", "--json"])
    opened = next(f for f in json.loads(res.stdout)["findings"] if f["id"] == "open")
    assert "is full" in opened["message"] and "failing" not in opened["message"]


# Larger than the -wal's own size, so the write cannot fit into WAL space a
# checkpoint may have freed for reuse: it needs new blocks the disk does not have.
LINE = "remember the blue door " + "z" * 600_000


def _turn_on_full_disk(home: Path, tiny_fs: Path):
    """An agent turn once the disk is full and the spool has no reserve."""
    from hstate_agent import Agent, Reply, ToolRegistry
    from hstate_agent.localmodel.server import LocalModelServer, queue_script
    import anthropic
    db = SessionDB.open(home)
    with LocalModelServer(queue_script(Reply.text("never asked"))) as srv:
        client = anthropic.Anthropic(base_url=srv.base_url, api_key="t", max_retries=0)
        agent = Agent(db, session_id="s1", client=client, tools=ToolRegistry())
        reserve_path(spool_dir_for(db.path)).unlink()
        fill(tiny_fs)
        append_until_full(db, "s1")  # the -wal has no room left either
        result = agent.run_turn(LINE)
        assert srv.requests == []
    return db, agent, result


def test_agent_hands_back_what_could_not_be_saved_anywhere(
        tiny_fs: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from hstate_cli.commands.chat import report_failure
    db, agent, result = _turn_on_full_disk(tiny_fs / "home", tiny_fs)
    try:
        assert result.failure_reason == "session_persistence_failed:disk_full"
        assert [m["content"] for m in result.unsaved] == [LINE]
        assert result.withdrawn == LINE
        assert all(m.get("content") != LINE
                   for m in agent.messages)  # withdrawn: not resent with the next line
        assert "could not be saved anywhere" in result.explanation.summary
        report_failure(result)  # what `hermes chat` prints
        err = capsys.readouterr().err
        assert "user: remember the blue door" in err and "kept in the spool" not in err
        out = tmp_path / "unsaved.jsonl"
        report_failure(result, out)  # `hermes chat --unsaved-to FILE`
        assert [json.loads(ln)["content"] for ln in out.read_text().splitlines()] == \
            [LINE]
        assert oct(out.stat().st_mode & 0o777) == "0o600"
        assert "user: remember" not in capsys.readouterr().err
    finally:
        db.close()


def test_chat_refuses_an_unsaved_to_that_is_not_a_regular_file(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["chat", "--offline", "-q", "x", "--unsaved-to", "/dev/null"])
    assert res.exit_code == 2 and "not a regular file" in res.output
