"""Transcripts read ahead in a worker process (log_prescan.py) import exactly
as when they are read in-process: the same report (line-numbered skips,
counts), the same sessions and messages, a second run adds nothing, and a
file that cannot be read is named as before. The same holds for a file's
messages kept in memory between the reader's passes or spilled to disk."""
from __future__ import annotations

from pathlib import Path

import pytest

from sessiondb import SessionDB
from sessiondb.importers import claude_code_import, codex_import, import_logs, log_lines, log_prescan
from tests.helpers import agent_logs as a


def _store_doc(db) -> dict:
    return {s.id: (s.title, s.parent_session_id, s.message_count,
                   [m.message for m in db.message_page(s.id, limit=500)])
            for s in db.list_sessions(limit=100, archived=None)}


@pytest.mark.parametrize("fmt", ["claude-code", "codex"])
def test_worker_and_in_process_give_the_same_import(tmp_path, monkeypatch, fmt):
    src = tmp_path / "src"
    if fmt == "claude-code":
        a.claude_v1(src / "p")
        a.claude_v2(src / "p")
        (src / "p" / "garbage.jsonl").write_text('{"type": "user"\nnot json\n')
    else:
        a.codex_legacy(src)
        a.codex_rollout(src)
    adopted: list[Path] = []
    reader = claude_code_import.ClaudeCodeReader if fmt == "claude-code" else \
        codex_import.CodexReader
    plain_adopt = reader.adopt

    def counted(self, scanned, names):  # the worker's pass was used, not a re-read
        adopted.append(self.path)
        plain_adopt(self, scanned, names)
    monkeypatch.setattr(reader, "adopt", counted)
    monkeypatch.setattr(log_prescan, "WORKERS", 1)  # one interpreter to start: a faster test
    docs = []
    for name, min_bytes in (("worker", 0), ("here", 1 << 60)):
        monkeypatch.setattr(log_prescan, "MIN_BYTES", min_bytes)
        monkeypatch.setattr(log_prescan, "cores_free", lambda: True)  # whatever the load
        with SessionDB(tmp_path / f"{name}.db") as db:
            report = import_logs(db, fmt, [src])
            again = import_logs(db, fmt, [src])
            docs.append((report.to_dict(), _store_doc(db),
                         again.totals()["messages_added"]))
    assert len(adopted) >= len(report.files) > 1  # both runs of the worker's store
    assert docs[0] == docs[1]
    assert docs[0][2] == 0
    if fmt == "claude-code":
        skipped = [s for f in docs[0][0]["files"] for s in f["skipped"]]
        assert [s["line"] for s in skipped if s["path"].endswith("garbage.jsonl")] == [1, 2]


@pytest.mark.parametrize("fmt", ["claude-code", "codex"])
def test_held_and_spilled_messages_give_the_same_import(tmp_path, monkeypatch, fmt):
    src = tmp_path / "src"
    if fmt == "claude-code":
        a.claude_v1(src / "p")  # inline sidechains: held and spilled in one file
        a.claude_v2(src / "p")
        (src / "p" / "garbage.jsonl").write_text('{"type": "user"\nnot json\n')
    else:
        a.codex_legacy(src)
        a.codex_rollout(src)
    docs = []
    for name, hold in (("held", 1 << 30), ("spilled", 0), ("both", 900)):
        monkeypatch.setattr(log_lines, "HOLD_BYTES", hold)
        with SessionDB(tmp_path / f"{name}.db") as db:
            report = import_logs(db, fmt, [src])
            docs.append((report.to_dict(), _store_doc(db)))
    assert docs[0] == docs[1] == docs[2]
    assert docs[0][0]["totals"]["messages_added"] > 0


def test_a_file_that_cannot_be_read_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(log_prescan, "MIN_BYTES", 0)
    monkeypatch.setattr(log_prescan, "cores_free", lambda: True)
    src = tmp_path / "p"
    a.claude_v2(src)
    locked = src / "locked.jsonl"
    locked.write_text('{"type": "summary", "summary": "x", "leafUuid": "u"}\n')
    locked.chmod(0)
    try:
        with SessionDB(tmp_path / "s.db") as db:
            report = import_logs(db, "claude-code", [src])
    finally:
        locked.chmod(0o600)
    [bad] = [f for f in report.files if f.lines.path == str(locked)]
    if bad.lines.skipped:  # root reads any file: nothing to name then
        assert bad.lines.skipped[0]["why"].startswith("cannot read the file")
    assert report.totals()["messages_added"] > 0
