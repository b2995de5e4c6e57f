"""Kill -9 during `import_spool`, CI size (`python -m
tests.reliability.spool_crash` runs more episodes)."""
from __future__ import annotations

from pathlib import Path

from tests.reliability import spool_crash


def test_killed_spool_import_then_reimport_gives_each_message_once(tmp_path: Path):
    out = spool_crash.run(tmp_path, episodes=4, seed=11)
    assert out["findings"] == []
    assert out["episodes"] == 4
