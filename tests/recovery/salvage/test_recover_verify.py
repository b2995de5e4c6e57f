"""Verification of an output store: each check can fail on its own."""
from __future__ import annotations

from pathlib import Path

import pytest

from hstate_recovery.salvage.verify import verify_output
from tests.helpers import damage


@pytest.fixture
def store(tmp_path: Path) -> Path:
    truth = damage.build_store(tmp_path / "new.db", sessions=3, per_session=40)
    damage.add_fts(truth.path)
    return truth.path


def test_sound_store_with_fts_verifies(store):
    v = verify_output(store, {"sessions": 3, "messages": 120}, {"messages": 120})
    assert v.ok, v.findings
    assert [f["name"] for f in v.checks["fts"]] == ["messages_fts", "messages_terms"]
    assert all(f["integrity_ok"] and f["probe_ok"] for f in v.checks["fts"])


def test_count_mismatch_and_shortfall_are_findings(store):
    v = verify_output(store, {"messages": 121}, {"sessions": 4})
    assert v.findings == ["table sessions: 0 rows kept, the source had 4 readable",
                          "table messages: 120 rows in the output, 121 written"]


def test_damaged_fts_index_fails_verification(store):
    damage.smash_page(store, damage.pages_of(store, "messages_fts_data", "leaf")[0])
    v = verify_output(store, {"messages": 120})
    assert not v.ok
    assert any(f.startswith("fts table messages_fts:") for f in v.findings)
    assert "integrity: CorruptError: database disk image is malformed" in v.findings


def test_stale_fts_index_fails_the_probe(store):
    # Rows the index never saw: the MATCH probe for an indexed word misses.
    damage.sql(store, "INSERT INTO messages_fts(messages_fts) VALUES('delete-all')")
    v = verify_output(store, {"messages": 120})
    assert any("messages_fts" in f for f in v.findings)
