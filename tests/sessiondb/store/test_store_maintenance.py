"""Pin, archive, prune, export and a hit's window as methods of the store,
on either backend (the feature functions' own tests are in
tests/sessiondb/maintenance/)."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from sessiondb import SessionDB
from sessiondb.maintenance import PruneFilter

pytestmark = pytest.mark.both_backends


def three_sessions(db: SessionDB) -> list[int]:
    ids = []
    for sid in ("keep", "hide", "drop"):
        db.create_session(sid, source="old")
        ids += db.append_messages(sid, [{"role": "user", "content": f"{sid} {i}"}
                                        for i in range(4)])
    return ids


def test_flags_through_the_store(db: SessionDB) -> None:
    three_sessions(db)
    assert db.pin_sessions(["keep"]) == ["keep"]
    assert db.archive_sessions(["hide"]) == ["hide"]
    assert {s.id for s in db.list_sessions()} == {"keep", "drop"}
    assert db.unarchive_sessions(["hide"]) == ["hide"]
    assert {s.id for s in db.list_sessions()} == {"keep", "hide", "drop"}
    assert db.unpin_sessions(["keep"]) == ["keep"]


@pytest.mark.sqlite_only(reason="prune's size estimate reads SQLite's page counts")
def test_a_prune_plan_through_the_store(db: SessionDB) -> None:
    three_sessions(db)
    db.pin_sessions(["keep"])
    plan = db.prune_sessions(PruneFilter(source="old"), dry_run=True)
    assert {s.id for s in plan.sessions} == {"hide", "drop"} and "keep" in plan.kept
    assert db.unpin_sessions(["keep"]) == ["keep"]
    plan = db.prune_sessions(PruneFilter(source="old"), dry_run=True)
    assert {s.id for s in plan.sessions} == {"keep", "hide", "drop"}


def test_export_and_a_hits_window_through_the_store(db: SessionDB, tmp_path: Path) -> None:
    ids = three_sessions(db)
    out = io.StringIO()
    summary = db.export_sessions(["drop"], "jsonl", out)
    assert (summary.sessions, summary.messages) == (1, 4)
    kinds = [json.loads(line)["type"] for line in out.getvalue().splitlines()]
    assert kinds.count("message") == 4
    summary = db.export_to_path(None, "jsonl", tmp_path / "all.jsonl")
    assert (summary.sessions, summary.messages, summary.output) == (
        3, 12, str(tmp_path / "all.jsonl"))
    window = db.messages_around("hide", ids[5], context=1)
    assert [m.message["content"] for m in window] == ["hide 0", "hide 1", "hide 2"]
