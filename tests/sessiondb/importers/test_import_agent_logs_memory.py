"""A 50 MB Claude Code transcript imports in bounded memory: the peak RSS of a
real `hermes sessions import` process grows by far less than the file does
between a 5 MB and a 50 MB transcript of the same shape.

Most of a real transcript's bytes are what the tool keeps beside the
messages (``toolUseResult`` with whole file contents); the generated file
is shaped that way, so the test stays quick while the reader still has to
stream every byte of it twice.
"""
from __future__ import annotations

import json
from pathlib import Path

from sessiondb import SessionDB
from tests.helpers import agent_logs as a
from tests.sessiondb.importers.test_transfer_memory import peak_kb

BULK = "x = compute(x)  # line of a file the tool read\n" * 480  # ~23 KB a tool result
TEXT = "the parser reads the header, then each record in turn " * 40  # ~2 KB


def write_transcript(path: Path, megabytes: int) -> int:
    """A transcript of about ``megabytes`` MB; returns its message count."""
    use = a.cc_assistant("UUID-a", "UUID-p", "2026-01-20T11:57:20.000Z",
                         [a.tool_use("toolu_UUID", "Read", {"file_path": "/src/app.py"})],
                         msg_id="msg_UUID")
    result = a.cc_user("UUID-r", "UUID-a", "2026-01-20T11:57:21.000Z",
                       [a.tool_result("toolu_UUID", TEXT)],
                       toolUseResult={"type": "text", "file": {"filePath": "/src/app.py",
                                                               "content": BULK}})
    pair = json.dumps(use) + "\n" + json.dumps(result) + "\n"
    count = megabytes * 1024 * 1024 // len(pair)
    with open(path, "w") as f:
        for i in range(count):
            f.write(pair.replace("UUID", f"{i:08d}"))
    return 2 * count


def test_a_50_mb_transcript_imports_in_bounded_memory(tmp_path):
    peaks, counts = {}, {}
    for name, mb in (("small", 5), ("large", 50)):
        path = tmp_path / name / f"{a.SESSION}.jsonl"
        path.parent.mkdir()
        counts[name] = write_transcript(path, mb)
        peaks[name] = peak_kb(tmp_path / f"home-{name}", "sessions", "import", "--from",
                              "claude-code", str(path), "--json")
        with SessionDB.open(tmp_path / f"home-{name}") as db:
            assert db.count_messages() == counts[name]
    # 45 MB more transcript; holding it (or its lines) would add far more than this
    assert peaks["large"] - peaks["small"] < 12 * 1024, peaks
