"""Crash torture, CI size: 25 seeded kill -9 episodes on one store
(`python -m tests.reliability.crash` runs the long version)."""
from __future__ import annotations

from pathlib import Path

import apsw

from tests.reliability import crash


def test_kill9_episodes_lose_nothing_acknowledged(tmp_path: Path):
    stats = crash.run(tmp_path / "crash", episodes=25, seed=20261130, max_delay=0.2)
    assert stats.findings == []
    assert stats.episodes == 25
    assert stats.acked_messages > 200  # the writer really wrote between kills
    assert stats.acked_compactions > 0
    assert stats.rows_checked >= stats.acked_messages


def test_checker_sees_missing_duplicate_and_half_batch(tmp_path: Path):
    """The checks can fail: doctor a crashed store by hand and look."""
    directory = tmp_path / "crash"
    crash.run(directory, episodes=1, seed=7, max_delay=0.1)
    path = directory / "state.db"
    records = crash.read_journal(directory / "acks.jsonl", crash.CrashStats())
    batch = next(r for r in records if r["op"] == "append" and len(r["texts"]) > 2)
    conn = apsw.Connection(str(path))
    conn.execute("DELETE FROM messages WHERE content = ?", (batch["texts"][0],))
    conn.execute("INSERT INTO messages(session_id, uid, position, role, content_kind, content,"
                 " timestamp, fingerprint) SELECT session_id, uid || 'x', position, role,"
                 " content_kind, content, timestamp, fingerprint FROM messages"
                 " WHERE content = ?", (batch["texts"][1],))
    conn.close()
    found = crash.check_rows(path, records, crash.CrashStats())
    session = batch["session"]
    assert f"acknowledged message missing: ('{session}', '{batch['texts'][0]}')" in found
    assert any(f.startswith(f"duplicate row ('{session}', '{batch['texts'][1]}')")
               for f in found)
    assert any(f.startswith("half batch") for f in found)
    assert any("message_count" in f for f in crash.store_findings(path))


def test_kills_during_start_up_and_first_migration(tmp_path: Path):
    """Each store is new, so the kill can land in file creation, the
    migrations, the generation stamp or the first session rows."""
    early = 0
    for seed in range(6):
        stats = crash.run(tmp_path / f"fresh{seed}", episodes=2, seed=seed, early_rate=1.0)
        assert stats.findings == []
        early += stats.early_kills
    assert early == 12
