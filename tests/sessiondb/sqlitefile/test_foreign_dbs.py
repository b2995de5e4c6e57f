"""The foreign-file builders make what their programs write (checked, since
every recovery test of a foreign format trusts their ground truth)."""
from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from tests.helpers import foreign_dbs as f


def _columns(path: Path, table: str) -> list[str]:
    conn = apsw.Connection(str(path))
    try:
        return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


@pytest.mark.parametrize("kind", sorted(f.BUILDERS))
def test_builders_make_healthy_files_with_their_truth(tmp_path: Path, kind: str) -> None:
    truth = f.BUILDERS[kind](tmp_path / "x.db", wal_tail=3)
    assert truth.kind == kind and truth.kind in f.KINDS
    assert Path(f"{truth.path}-wal").exists() and not Path(f"{truth.path}-shm").exists()
    conn = apsw.Connection(str(truth.path))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for table, n in truth.counts.items():
            assert conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] == n
    finally:
        conn.close()
    assert truth.counts[truth.main_table] > 0


def test_hermes_agent_upgraded_file_keeps_columns_in_the_order_added(tmp_path: Path) -> None:
    fresh = f.build_hermes_agent(tmp_path / "fresh.db", sessions=4, messages=4)
    up = f.build_hermes_agent(tmp_path / "up.db", sessions=4, messages=4, upgraded=True)
    fresh_cols, up_cols = _columns(fresh.path, "messages"), _columns(up.path, "messages")
    assert sorted(fresh_cols) == sorted(up_cols) and fresh_cols != up_cols
    assert up_cols[:9] == ["id", "session_id", "role", "content", "tool_call_id", "tool_calls",
                           "tool_name", "timestamp", "token_count"]
    assert fresh_cols == [n for n, _ in f.HERMES_MESSAGES_COLUMNS]
    assert up.virtual == ["messages_fts", "messages_fts_trigram"] == fresh.virtual


def test_llm_layouts(tmp_path: Path) -> None:
    new = f.build_llm(tmp_path / "new.db", conversations=2, responses=2)
    old = f.build_llm(tmp_path / "old.db", conversations=2, responses=2, layout="responses")
    assert {"threads", "turns", "messages", "parts"} <= set(new.rowids)
    assert not {"threads", "turns", "messages", "parts"} & set(old.rowids)
    assert old.counts["responses"] == new.counts["responses"] == 4
